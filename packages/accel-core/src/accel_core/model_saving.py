"""``Accelerator.save_model``: a model's weights as a (sharded) safetensors or ``torch.save``
checkpoint that transformers' ``from_pretrained`` and accel-bigmodel's loaders read.

Call order, on every process: the arguments are checked (a ``save_directory`` that is a file, a
bad ``max_shard_size``, parameters on the meta device raise here, on every process alike); the
strategy gathers the state dict (``accelerator.get_state_dict``); the main process (each node's
with ``ProjectConfiguration(save_on_each_node=True)``) writes; then every process waits for the
others (``accelerator.wait_for_everyone``), also when the write failed, so that the error of the
writer is what ends the run, not a hang.

The write, on a writing process:

1. Tied weights (tensors sharing storage) keep their first name only (safetensors), or stay
   shared in one shard (``torch.save``); non-contiguous tensors are made contiguous.
2. Every shard, then the index (when there are several shards), is written to a hidden
   temporary name in ``save_directory`` (``.model-00001-of-00002.safetensors.<id>.tmp``).
   Just before a shard is written, the kernel is told to drop the cached pages of the file of
   that name it will replace (clean pages only: the file itself is unchanged), so the new save
   reuses that memory instead of needing as much again.
3. Only when all of them are complete are they moved into place (the old file of that name
   unlinked, the temporary one renamed), the index last. Until then the folder still holds the
   previous save unchanged, so a crash while writing (the long part) leaves it loadable; a failed
   write removes its temporary files. Only a crash among the renames themselves (metadata
   operations, milliseconds) can leave old and new shards mixed, or one missing.
4. Files of a previous save of the same format that the new one does not reuse (its index, shards
   beyond the new count, a single file replaced by shards or the reverse) are removed, the index
   first. Files of the other format are kept, with a warning, since loaders may prefer them.

While the files are written the folder holds both saves: it needs free space for the new one.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel_core.offloaded_weights import offloaded_state_dict
from accel_core.serialization import clean_state_dict_for_safetensors
from accel_core.shard_planning import (
    PICKLE,
    SAFETENSORS,
    ShardPlan,
    WeightsFormat,
    parse_size,
    plan_shards,
    storage_key,
)

if TYPE_CHECKING:
    from accel_core.accelerator import Accelerator
    from accel_core.checkpointing.object_storage import RemoteFolder

logger = logging.getLogger(__name__)


def save_model(
    accelerator: Accelerator,
    model: torch.nn.Module,
    save_directory: str | os.PathLike[str],
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
) -> None:
    """Save ``model``'s weights in ``save_directory`` (created if needed); call on every process.

    Args:
        accelerator: gathers the state dict and says which processes write.
        model: the model, wrapped by ``prepare`` or not.
        save_directory: the folder to write to; an existing file there raises
            ``NotADirectoryError`` before anything is gathered or written.
        max_shard_size: the most bytes of tensor data per file, as an int or a string such as
            ``"10GB"`` (10**9 bytes) or ``"5GiB"`` (5 * 2**30). A tensor larger than this gets a
            file of its own.
        safe_serialization: write ``model.safetensors`` (or ``model-0000k-of-0000n.safetensors``
            and ``model.safetensors.index.json``); ``False`` writes ``pytorch_model.bin`` files
            with ``torch.save`` instead.

    Raises:
        NotADirectoryError: ``save_directory`` is an existing file.
        ValueError: ``max_shard_size`` is not a size.
        RuntimeError: some parameters or buffers are on the meta device.
        TypeError: the state dict holds values that are not tensors and
            ``safe_serialization=True``.
    """
    directory = _target(save_directory, accelerator)
    if isinstance(directory, Path) and directory.is_file():
        raise NotADirectoryError(
            f"save_model writes a folder of weight files, but save_directory={str(directory)!r} "
            f"is an existing file: pass a folder (it is created if missing)."
        )
    limit = parse_size(max_shard_size)
    weights_format = SAFETENSORS if safe_serialization else PICKLE
    unwrapped = accelerator.unwrap_model(model)
    state_dict = offloaded_state_dict(unwrapped)
    if state_dict is None:
        _refuse_meta(_named_tensors(unwrapped))
        state_dict = accelerator.get_state_dict(model)
    if accelerator.project_configuration.save_on_each_node:
        writes = accelerator.is_local_main_process
    else:
        writes = accelerator.is_main_process
    try:
        if writes and not isinstance(directory, Path):
            from accel_core.model_upload import upload_checkpoint

            ready = _ready_for(weights_format, state_dict)
            upload_checkpoint(ready, directory, limit, weights_format, _write_shard)
        elif writes:
            write_checkpoint(state_dict, directory, limit, weights_format)
    finally:
        accelerator.wait_for_everyone()


def _target(
    save_directory: str | os.PathLike[str], accelerator: Accelerator
) -> Path | RemoteFolder:
    """The local folder (``file://`` URLs included) or the folder at a URL that
    ``save_directory`` names; a URL fsspec can't serve raises here, before anything is
    gathered or written."""
    from accel_core.checkpointing.object_storage import location, url_protocol

    if url_protocol(save_directory) is None:
        return Path(save_directory)  # as before URLs: no ``~`` expansion
    options = accelerator.project_configuration.storage_options
    return location(save_directory, options, operation="save_model")


def write_checkpoint(
    state_dict: Mapping[str, Any],
    directory: Path,
    max_shard_size: int,
    weights_format: WeightsFormat,
) -> ShardPlan:
    """Write ``state_dict`` into ``directory`` as described in the module docstring (steps 1-4).

    This is the single-process part of :func:`save_model`; it returns the plan it wrote.
    """
    state = _ready_for(weights_format, state_dict)
    plan = plan_shards(state, max_shard_size, weights_format)
    directory.mkdir(parents=True, exist_ok=True)
    _write_then_rename(directory, plan, state, weights_format)
    names = set(plan.files) | ({weights_format.index_name} if plan.is_sharded else set())
    _remove_stale(directory, weights_format, keep=names)
    _warn_other_format(directory, weights_format)
    if plan.is_sharded:
        logger.info(
            "The model is larger than max_shard_size (%d bytes): saved %d shards in %s, indexed "
            "in %s.",
            max_shard_size,
            len(plan.files),
            directory,
            weights_format.index_name,
        )
    else:
        logger.info("Model weights saved in %s", directory / next(iter(plan.files)))
    return plan


def _named_tensors(model: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    yield from model.named_parameters(remove_duplicate=False)
    yield from model.named_buffers(remove_duplicate=False)


def _refuse_meta(named: Iterable[tuple[str, Any]]) -> None:
    on_meta = [name for name, value in named if isinstance(value, torch.Tensor) and value.is_meta]
    if on_meta:
        more = f" and {len(on_meta) - 5} more" if len(on_meta) > 5 else ""
        shown = ", ".join(on_meta[:5]) + more
        raise RuntimeError(
            f"cannot save the model: {len(on_meta)} tensors are on the meta device and hold no "
            f"values ({shown}). This happens to a model built under init_empty_weights that was "
            f"never loaded: load the weights (load_checkpoint_and_dispatch) before saving."
        )


def _ready_for(weights_format: WeightsFormat, state_dict: Mapping[str, Any]) -> dict[str, Any]:
    _refuse_meta(state_dict.items())
    if weights_format is SAFETENSORS:
        others = [name for name, value in state_dict.items() if not isinstance(value, torch.Tensor)]
        if others:
            raise TypeError(
                f"safetensors stores tensors only, and the state dict holds other values under "
                f"{others[:5]}: save with safe_serialization=False (torch.save), or remove them."
            )
        return clean_state_dict_for_safetensors(dict(state_dict))
    # torch.save keeps storages shared: make contiguous only the tensors that share with none.
    users: dict[tuple[torch.device, int, int], int] = {}
    for value in state_dict.values():
        if isinstance(value, torch.Tensor):
            users[storage_key(value)] = users.get(storage_key(value), 0) + 1
    return {
        name: value.contiguous()
        if isinstance(value, torch.Tensor) and users[storage_key(value)] == 1
        else value
        for name, value in state_dict.items()
    }


def _write_then_rename(
    directory: Path, plan: ShardPlan, state: Mapping[str, Any], weights_format: WeightsFormat
) -> None:
    pending: dict[str, Path] = {}  # final name -> temporary file, the index last
    try:
        for filename, names in plan.files.items():
            pending[filename] = _temporary_path(directory, filename)
            _release_cached_pages(directory / filename)
            _write_shard({name: state[name] for name in names}, pending[filename], weights_format)
        if plan.is_sharded:
            index = weights_format.index_name
            pending[index] = _temporary_path(directory, index)
            content = json.dumps(plan.index(), indent=2, sort_keys=True) + "\n"
            pending[index].write_text(content, encoding="utf-8")
        for filename in list(pending):
            # Unlink first: renaming over an existing file makes ext4 flush the new data at once
            # (its replace-via-rename heuristic), which made saving over a previous save 3x slower.
            (directory / filename).unlink(missing_ok=True)
            os.replace(pending[filename], directory / filename)
            del pending[filename]
    except BaseException:
        for temporary in pending.values():
            temporary.unlink(missing_ok=True)
        raise


def _release_cached_pages(path: Path) -> None:
    """Let the kernel drop the page cache of the file ``path`` replaces (its clean pages only:
    nothing of the file is lost), so that writing the new file reuses that memory.

    Without it the old and the new save sit in memory together, and the new one needs memory the
    kernel must first provide: saving 1 GB over a previous save took 2.7 s of kernel time instead
    of 0.75 s (a VM that hands freed memory back to its host).
    """
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no previous file (or not readable): nothing to release
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass  # a filesystem without page-cache advice: the write is the same, only slower
    finally:
        os.close(descriptor)


def _temporary_path(directory: Path, filename: str) -> Path:
    # Hidden, and ending in .tmp: no loader takes it for a weights file.
    return directory / f".{filename}.{uuid.uuid4().hex[:12]}.tmp"


def _write_shard(shard: dict[str, Any], path: Path, weights_format: WeightsFormat) -> None:
    if weights_format is SAFETENSORS:
        from safetensors.torch import save_file

        save_file(shard, path, metadata={"format": "pt"})
    else:
        torch.save(shard, path)


def _remove_stale(directory: Path, weights_format: WeightsFormat, keep: set[str]) -> None:
    stale = [
        entry
        for entry in directory.iterdir()
        if weights_format.is_weights_file(entry.name) and entry.name not in keep
    ]
    # The index first: an index never names shards that are gone.
    stale.sort(key=lambda entry: (entry.name != weights_format.index_name, entry.name))
    for entry in stale:
        if entry.is_file():
            entry.unlink(missing_ok=True)


def _warn_other_format(directory: Path, weights_format: WeightsFormat) -> None:
    other = PICKLE if weights_format is SAFETENSORS else SAFETENSORS
    found = sorted(entry.name for entry in directory.iterdir() if other.is_weights_file(entry.name))
    if found:
        logger.warning(
            "%s also holds %s from a save with safe_serialization=%s. Loaders choose between the "
            "formats on their own (transformers prefers safetensors, accel-bigmodel an index) "
            "and may read those files instead of the ones just written: delete them if they are "
            "stale.",
            directory,
            found[:5],
            weights_format is PICKLE,
        )
