"""Merge a sharded torch.distributed.checkpoint folder (as FSDP writes) into one state dict file.

Reading needs no process group: every shard is read in this one process. Writing safetensors needs
the ``safetensors`` package (``pip install accel-launch[merge]``). The file appears whole or not at
all (a temporary file in the same folder is renamed over it). Either folder may be a URL
(``s3://bucket/run/pytorch_model_fsdp_0``, see :mod:`accel_launch.url_folders`): the shards are
read from the store by torch's fsspec reader, and the merged file is written to a local temporary
folder and uploaded in one piece. Called inside a process group of
several processes (Accelerate's ``merge_command`` in a training script), only rank 0 merges and
every process waits for it, as Accelerate's does: no process sees the file half-written.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

from accel_launch import url_folders
from accel_launch.atomic_write import write_atomically
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
    source = url_folders.folder(checkpoint_dir)
    _check_checkpoint_folder(source)
    # The same private pieces torch's own format_utils.dcp_to_torch_save uses: the public
    # dcp.load copies the dict it is given, so an empty dict cannot be filled through it.
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    if isinstance(source, Path):
        reader: Any = FileSystemReader(str(source))
    else:  # read shard by shard from the store (torch's fsspec reader), no local copy
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        reader = FsspecReader(source.url)
    state: dict[str, Any] = {}
    _load_state_dict(
        state,
        storage_reader=reader,
        planner=_EmptyStateDictLoadPlanner(),
        no_dist=True,
    )
    if len(state) == 1 and isinstance(state.get("model"), dict):
        state = state["model"]
    return _flatten(state)


def _check_checkpoint_folder(folder: Path | url_folders.UrlFolder) -> None:
    if isinstance(folder, url_folders.UrlFolder):
        found = folder.fs.exists(folder.file(".metadata"))
        folder_text = folder.url
    else:
        found = (folder / ".metadata").is_file()
        folder_text = str(folder)
    if not found:
        raise AccelLaunchError(
            f"{folder_text!r} is not a torch.distributed.checkpoint folder (no .metadata file); "
            "pass the folder the sharded checkpoint was saved to"
        )


def merge_weights(
    checkpoint_dir: str | Path,
    output_dir: str | Path,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> Path | str:
    """Merge ``checkpoint_dir`` into ``output_dir/model.safetensors`` (or ``pytorch_model.bin``).

    Non-tensor entries (step counters...) are left out of a safetensors file. Returns the file
    written (its URL when ``output_dir`` is one). ``remove_checkpoint_dir`` deletes the sharded
    folder afterwards. In a process group of several processes every process calls it; rank 0
    merges and the others wait at a barrier.
    """
    if safe_serialization and importlib.util.find_spec("safetensors") is None:
        raise AccelLaunchError(
            "writing safetensors needs the safetensors package: pip install 'accel-launch[merge]' "
            "(or pass --unsafe_serialization to write pytorch_model.bin with torch.save)"
        )
    _check_checkpoint_folder(url_folders.folder(checkpoint_dir))
    out = url_folders.folder(output_dir)
    name = SAFE_WEIGHTS_NAME if safe_serialization else WEIGHTS_NAME
    group = _process_group_rank()
    if group in (None, 0):
        if isinstance(out, Path):
            _merge_into(out / name, checkpoint_dir, safe_serialization)
        else:  # merged locally, then one upload: the object appears whole or not at all
            with tempfile.TemporaryDirectory(prefix="accel-merge-") as staging:
                local = Path(staging) / name
                _merge_into(local, checkpoint_dir, safe_serialization)
                out.fs.put_file(str(local), out.file(name))
        if remove_checkpoint_dir:
            _remove(url_folders.folder(checkpoint_dir))
    if group is not None:
        import torch.distributed as dist

        dist.barrier()
    return out / name if isinstance(out, Path) else f"{out.url}/{name}"


def _remove(folder: Path | url_folders.UrlFolder) -> None:
    if isinstance(folder, Path):
        shutil.rmtree(folder)
    else:
        folder.fs.rm(folder.path, recursive=True)


def _process_group_rank() -> int | None:
    """This process's rank in torch's default process group of two or more, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank()
    return None


def _merge_into(target: Path, checkpoint_dir: str | Path, safe_serialization: bool) -> None:
    state = load_sharded(checkpoint_dir)
    import torch

    target.parent.mkdir(parents=True, exist_ok=True)
    if safe_serialization:
        from safetensors.torch import save_file

        tensors = {
            k: v.contiguous().clone() for k, v in state.items() if isinstance(v, torch.Tensor)
        }
        write_atomically(target, lambda path: save_file(tensors, path, metadata={"format": "pt"}))
    else:
        write_atomically(target, lambda path: torch.save(state, path))
