"""Merge a sharded torch.distributed.checkpoint folder (as FSDP writes) into one state dict file.

Reading needs no process group: every shard is read in this one process. Writing safetensors needs
the ``safetensors`` package (``pip install accel-launch[merge]``).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

from accel_launch.errors import AccelLaunchError

SAFE_WEIGHTS_NAME = "model.safetensors"
WEIGHTS_NAME = "pytorch_model.bin"


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def load_sharded(checkpoint_dir: str | Path) -> dict[str, Any]:
    """Read every entry of a distributed checkpoint into one flat ``{name: tensor}`` dict.

    A lone top-level ``model`` entry (how FSDP sharded state dicts are commonly saved) is
    unwrapped; nested dicts are flattened with dots.
    """
    folder = Path(checkpoint_dir)
    if not (folder / ".metadata").is_file():
        raise AccelLaunchError(
            f"{str(folder)!r} is not a torch.distributed.checkpoint folder (no .metadata file); "
            "pass the folder the sharded checkpoint was saved to"
        )
    # The same private pieces torch's own format_utils.dcp_to_torch_save uses: the public
    # dcp.load copies the dict it is given, so an empty dict cannot be filled through it.
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(
        state,
        storage_reader=FileSystemReader(str(folder)),
        planner=_EmptyStateDictLoadPlanner(),
        no_dist=True,
    )
    if len(state) == 1 and isinstance(state.get("model"), dict):
        state = state["model"]
    return _flatten(state)


def merge_weights(
    checkpoint_dir: str | Path,
    output_dir: str | Path,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> Path:
    """Merge ``checkpoint_dir`` into ``output_dir/model.safetensors`` (or ``pytorch_model.bin``).

    Non-tensor entries (step counters...) are left out of a safetensors file. Returns the file
    written. ``remove_checkpoint_dir`` deletes the sharded folder afterwards.
    """
    if safe_serialization and importlib.util.find_spec("safetensors") is None:
        raise AccelLaunchError(
            "writing safetensors needs the safetensors package: pip install 'accel-launch[merge]' "
            "(or pass --unsafe_serialization to write pytorch_model.bin with torch.save)"
        )
    state = load_sharded(checkpoint_dir)
    import torch

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if safe_serialization:
        from safetensors.torch import save_file

        tensors = {
            k: v.contiguous().clone() for k, v in state.items() if isinstance(v, torch.Tensor)
        }
        target = out / SAFE_WEIGHTS_NAME
        save_file(tensors, str(target), metadata={"format": "pt"})
    else:
        target = out / WEIGHTS_NAME
        torch.save(state, target)
    if remove_checkpoint_dir:
        shutil.rmtree(checkpoint_dir)
    return target
