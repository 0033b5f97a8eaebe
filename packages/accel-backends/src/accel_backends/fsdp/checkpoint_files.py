"""Merging a sharded FSDP checkpoint (a torch.distributed.checkpoint folder) into one file.

Reading needs no process group: this process reads every shard through torch's public
``torch.distributed.checkpoint.load`` into full-size tensors it allocates from the checkpoint's
metadata, so memory holds the whole state dict once. ``accel merge-weights`` (accel-launch) does
the same from the command line; the two packages don't import each other, so each has its reader.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel_core.checkpointing.layouts import (
    MODEL,
    OPTIMIZER,
    Key,
    Region,
    SavedLayout,
    SavedTensor,
    slice_region,
)
from accel_ops.constants import SAFE_WEIGHTS_NAME, WEIGHTS_NAME

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointReader
    from accel_core.checkpointing.object_storage import RemoteFolder

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

    folder = _folder(checkpoint_dir, "read_distributed_checkpoint")
    if not _has_metadata(folder):
        raise ValueError(_not_a_checkpoint_message(folder))
    metadata = _storage_reader(folder).read_metadata()
    state: StateDict = {}
    for key, item in metadata.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            state[key] = torch.empty(item.size, dtype=item.properties.dtype)
        else:
            state[key] = None  # bytes (a pickled value): replaced by the value on load
    with warnings.catch_warnings():  # single-process reading is the intent, not a fallback
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, storage_reader=_storage_reader(folder), no_dist=True)
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    return _unwrap_single_section(state, paths)


def _unwrap_single_section(state: StateDict, paths: dict[str, tuple[object, ...]]) -> StateDict:
    tops = {paths[key][0] if key in paths else key for key in state}
    if len(tops) != 1 or not all(len(paths.get(key, ())) > 1 for key in state):
        return state
    return {".".join(str(part) for part in paths[key][1:]): value for key, value in state.items()}


def _folder(value: str | Path, operation: str) -> Path | RemoteFolder:
    """A local folder, or one at a URL (``s3://...``; see accel-core's object storage)."""
    from accel_core.checkpointing.object_storage import location

    return location(value, operation=operation)


def _has_metadata(folder: Path | RemoteFolder) -> bool:
    if isinstance(folder, Path):
        return (folder / ".metadata").is_file()
    return bool(folder.fs.exists(folder.file(".metadata")))


def _storage_reader(folder: Path | RemoteFolder) -> Any:
    """DCP's reader of ``folder``: files, or torch's fsspec reader streaming from the store."""
    import torch.distributed.checkpoint as dcp

    if isinstance(folder, Path):
        return dcp.FileSystemReader(str(folder))
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    return FsspecReader(folder.url)


def _not_a_checkpoint_message(folder: Path | RemoteFolder) -> str:
    message = f"Tried to load from {folder} but couldn't find a valid metadata file."
    if not isinstance(folder, Path):
        return message
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
    the model's ``pytorch_model_fsdp_0`` or the optimizer's ``optimizer_0``). Either folder may
    be a URL (``s3://...``): the shards are read from the store by torch's fsspec reader, and the
    merged file is written locally and uploaded in one piece. Without
    ``safe_serialization`` the file is ``pytorch_model.bin`` (``torch.save``); safetensors holds
    tensors only, so other entries (optimizer steps, settings) are left out of it, with a
    warning. Runs on the main process; every process waits for it. ``remove_checkpoint_dir``
    deletes the sharded folder afterwards.

    Raises ``ValueError`` when ``checkpoint_dir`` is not a checkpoint folder, naming the ones
    inside it that are.
    """
    from accel_ops import PartialState

    folder = _folder(checkpoint_dir, "merge_fsdp_weights")
    output = _folder(output_path, "merge_fsdp_weights")  # a URL that can't be served: before
    if not _has_metadata(folder):
        raise ValueError(_not_a_checkpoint_message(folder))
    state = PartialState()
    if state.is_main_process:
        logger.info("Merging FSDP weights from %s", folder)
        merged = read_distributed_checkpoint(checkpoint_dir)
        name = SAFE_WEIGHTS_NAME if safe_serialization else WEIGHTS_NAME
        if isinstance(output, Path):
            output.mkdir(parents=True, exist_ok=True)
            _write_merged(merged, output / name, safe_serialization)
        else:  # written locally, then uploaded in one piece (whole or not at all)
            with tempfile.TemporaryDirectory(prefix="accel-merge-") as staging:
                _write_merged(merged, Path(staging) / name, safe_serialization)
                output.fs.put_file(str(Path(staging) / name), output.file(name))
        logger.info("Merged FSDP weights saved to %s/%s", output, name)
        if remove_checkpoint_dir:
            logger.info("Removing the sharded checkpoint %s", folder)
            if isinstance(folder, Path):
                shutil.rmtree(folder)
            else:
                folder.fs.rm(folder.path, recursive=True)
    state.wait_for_everyone()


def _write_merged(merged: StateDict, path: Path, safe_serialization: bool) -> None:
    from accel_core import save

    if safe_serialization:
        left_out = sorted(k for k, v in merged.items() if not isinstance(v, torch.Tensor))
        if left_out:
            logger.warning("Left out of %s (not tensors): %s", path.name, left_out)
        tensors = {k: v for k, v in merged.items() if isinstance(v, torch.Tensor)}
        save(tensors, path, safe_serialization=True)
    else:
        save(merged, path, safe_serialization=False)


# -- the sharded layout, read by any strategy (accel_core.checkpointing.layouts) -------------------


class DistributedCheckpointLayout(SavedLayout):
    """``pytorch_model_fsdp_<i>/`` and ``optimizer_<i>/`` (torch.distributed.checkpoint folders,
    sections ``"model"`` and ``"optimizer"``) for a strategy that does not read DCP itself (one
    process, DDP, DeepSpeed).

    Every entry is described by the folder's ``.metadata`` (global shapes: an FSDP shard or a
    tensor-parallel ``DTensor`` records the whole tensor's); reading gives whole tensors, each
    process reading every shard file's parts of the entries asked for (``dcp.load`` without a
    process group). A region is cut from the whole tensor: a sharded strategy reads these folders
    through DCP itself, shard by shard.
    """

    kind = "FSDP sharded checkpoint (torch.distributed.checkpoint)"

    def __init__(self, reader: CheckpointReader, index: int) -> None:
        from accel_backends.fsdp import dcp

        self.reader = reader
        self.folders = {MODEL: dcp.model_folder(index), OPTIMIZER: dcp.optimizer_folder(index)}
        self.files = f"{self.folders[MODEL]}/, {self.folders[OPTIMIZER]}/"
        self._keys: dict[str, dict[Key, str]] = {}
        self._groups: list[dict[str, Any]] = []
        self._verified: set[str] = set()

    def has_optimizer(self) -> bool:
        return self.reader.path(f"{self.folders[OPTIMIZER]}/.metadata").is_file()

    def entries(
        self, section: str, param_names: Sequence[Sequence[str]] | None = None
    ) -> dict[Key, SavedTensor | Any]:
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        folder = self._checked(section)
        metadata = _metadata(folder)
        paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
        keys: dict[Key, str] = {}
        found: dict[Key, SavedTensor | Any] = {}
        groups: dict[str, tuple[int, str]] = {}  # DCP key -> (group, setting)
        for key, item in metadata.state_dict_metadata.items():
            saved = tuple(paths.get(key, (section, key)))
            path = saved[1:] if saved and saved[0] == section else saved
            if section == OPTIMIZER and path[:1] == ("param_groups",) and len(path) == 3:
                groups[key] = (int(path[1]), str(path[2]))
                continue
            path = (".".join(str(p) for p in path),) if section == MODEL else tuple(map(str, path))
            keys[path] = key
            if isinstance(item, TensorStorageMetadata):
                found[path] = SavedTensor(tuple(item.size), item.properties.dtype)
            else:
                found[path] = None  # a pickled value: read with the tensors
        self._keys[section] = keys
        if groups:  # DCP stores each setting of each group apart: one value again
            values = _load(folder, dict.fromkeys(groups))
            settings: list[dict[str, Any]] = [
                {} for _ in range(1 + max(g for g, _ in groups.values()))
            ]
            for key, (group, name) in groups.items():
                settings[group][name] = values[key]
            found[("param_groups",)] = settings
            self._groups = settings
        return found

    def read(self, section: str, requests: Sequence[tuple[Key, Region | None]]) -> list[Any]:
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        folder = self._checked(section)
        keys = self._keys[section]
        metadata = _metadata(folder)
        state: dict[str, Any] = {}
        for path, _ in requests:
            if path == ("param_groups",):
                continue
            item = metadata.state_dict_metadata[keys[path]]
            if isinstance(item, TensorStorageMetadata):
                state[keys[path]] = torch.empty(item.size, dtype=item.properties.dtype)
            else:
                state[keys[path]] = None
        state = _load(folder, state)
        return [
            self._groups if path == ("param_groups",) else slice_region(state[keys[path]], region)
            for path, region in requests
        ]

    def _checked(self, section: str) -> Path:
        # the DCP module's check (dcp.py's save side is being changed concurrently: left private)
        from accel_backends.fsdp.dcp import _verify_folder

        folder = self.folders[section]
        if folder not in self._verified:
            _verify_folder(self.reader, folder)
            self._verified.add(folder)
        return self.reader.path(folder)


def _metadata(folder: Path) -> Any:
    import torch.distributed.checkpoint as dcp

    return dcp.FileSystemReader(str(folder)).read_metadata()


def _load(folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (DCP keys: an empty tensor of the whole shape, or ``None`` for a pickled value)
    filled from ``folder`` by this process alone."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    with warnings.catch_warnings():  # reading without a process group is the intent
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(
            state,
            storage_reader=dcp.FileSystemReader(str(folder)),
            planner=DefaultLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    return state


def find_layout(reader: CheckpointReader, index: int) -> SavedLayout | None:
    """The DCP folders of model ``index`` (a checkpoint of the ``fsdp`` strategy's
    ``SHARDED_STATE_DICT``, or Accelerate's under FSDP), if the folder has them."""
    from accel_backends.fsdp import dcp

    if not reader.path(f"{dcp.model_folder(index)}/.metadata").is_file():
        return None
    return DistributedCheckpointLayout(reader, index)


def _looks_for(index: int) -> str:
    from accel_backends.fsdp import dcp

    return f"torch.distributed.checkpoint folder {dcp.model_folder(index)}/"


#: What an error says it looks for (accel_core.checkpointing.layouts, when no layout is found).
find_layout.looks_for = _looks_for  # type: ignore[attr-defined]
