"""Merging a sharded FSDP checkpoint (a torch.distributed.checkpoint folder) into one file.

Reading needs no process group: this process reads every shard through torch's public
``torch.distributed.checkpoint.load`` into full-size tensors it allocates from the checkpoint's
metadata, so memory holds the whole state dict once. ``accel merge-weights`` (accel-launch) does
the same from the command line; the two packages don't import each other, so each has its reader.
"""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import torch

from accel_ops.constants import SAFE_WEIGHTS_NAME, WEIGHTS_NAME

logger = logging.getLogger(__name__)

#: A merged state dict: tensors, and for optimizer checkpoints plain values (steps, settings).
StateDict = dict[str, object]


def read_distributed_checkpoint(checkpoint_dir: str | Path) -> StateDict:
    """Every entry of the torch.distributed.checkpoint folder ``checkpoint_dir``, flat.

    Keys are the names the state dict was saved with; a single top-level section (how FSDP
    model checkpoints are saved, ``{"model": state_dict}``) is unwrapped. Raises ``ValueError``
    when the folder has no ``.metadata`` file.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    folder = Path(checkpoint_dir)
    if not (folder / ".metadata").is_file():
        raise ValueError(_not_a_checkpoint_message(folder))
    metadata = dcp.FileSystemReader(str(folder)).read_metadata()
    state: StateDict = {}
    for key, item in metadata.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            state[key] = torch.empty(item.size, dtype=item.properties.dtype)
        else:
            state[key] = None  # bytes (a pickled value): replaced by the value on load
    with warnings.catch_warnings():  # single-process reading is the intent, not a fallback
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder)), no_dist=True)
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    return _unwrap_single_section(state, paths)


def _unwrap_single_section(state: StateDict, paths: dict[str, tuple[object, ...]]) -> StateDict:
    tops = {paths[key][0] if key in paths else key for key in state}
    if len(tops) != 1 or not all(len(paths.get(key, ())) > 1 for key in state):
        return state
    return {".".join(str(part) for part in paths[key][1:]): value for key, value in state.items()}


def _not_a_checkpoint_message(folder: Path) -> str:
    message = f"Tried to load from {folder} but couldn't find a valid metadata file."
    candidates = [
        name for name in ("pytorch_model_fsdp_0", "optimizer_0") if (folder / name).exists()
    ]
    if candidates:
        listed = " or ".join(str(folder / name) for name in candidates)
        message += f" Potential checkpoint folders exist inside it: pass {listed} instead."
    return message


def merge_fsdp_weights(
    checkpoint_dir: str,
    output_path: str,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> None:
    """Merge a sharded FSDP checkpoint into ``output_path/model.safetensors``.

    ``checkpoint_dir`` is a torch.distributed.checkpoint folder (FSDP's ``SHARDED_STATE_DICT``,
    the model's ``pytorch_model_fsdp_0`` or the optimizer's ``optimizer_0``). Without
    ``safe_serialization`` the file is ``pytorch_model.bin`` (``torch.save``); safetensors holds
    tensors only, so other entries (optimizer steps, settings) are left out of it, with a
    warning. Runs on the main process; every process waits for it. ``remove_checkpoint_dir``
    deletes the sharded folder afterwards.

    Raises ``ValueError`` when ``checkpoint_dir`` is not a checkpoint folder, naming the ones
    inside it that are.
    """
    from accel_core import save
    from accel_ops import PartialState

    folder = Path(checkpoint_dir)
    if not (folder / ".metadata").is_file():
        raise ValueError(_not_a_checkpoint_message(folder))
    state = PartialState()
    if state.is_main_process:
        logger.info("Merging FSDP weights from %s", folder)
        merged = read_distributed_checkpoint(folder)
        target = Path(output_path)
        target.mkdir(parents=True, exist_ok=True)
        if safe_serialization:
            left_out = sorted(k for k, v in merged.items() if not isinstance(v, torch.Tensor))
            if left_out:
                logger.warning("Left out of %s (not tensors): %s", SAFE_WEIGHTS_NAME, left_out)
            tensors = {k: v for k, v in merged.items() if isinstance(v, torch.Tensor)}
            save(tensors, target / SAFE_WEIGHTS_NAME, safe_serialization=True)
            written = target / SAFE_WEIGHTS_NAME
        else:
            save(merged, target / WEIGHTS_NAME, safe_serialization=False)
            written = target / WEIGHTS_NAME
        logger.info("Merged FSDP weights saved to %s", written)
        if remove_checkpoint_dir:
            logger.info("Removing the sharded checkpoint %s", folder)
            shutil.rmtree(folder)
    state.wait_for_everyone()
