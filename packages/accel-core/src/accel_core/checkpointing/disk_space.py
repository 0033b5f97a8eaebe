"""The free-space check that runs before the first byte of a checkpoint is written.

A checkpoint that can't fit would fail half-way, and ``torch.save`` reports a full disk as
``inline_container.cc ... unexpected pos`` (miniz's offset no longer matches after the failed
write), which names neither the folder nor the cause. So each process adds up the bytes of the
tensors it is about to write and compares them with the free space of the checkpoint's
filesystem first: an error here names both numbers and the folder, and nothing is written.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel_core.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel_core.checkpointing.snapshot import Snapshot

#: Room kept for what is not a tensor (pickled dicts, headers, the manifest).
OVERHEAD_BYTES = 1 << 20


def tensor_bytes(obj: Any) -> int:
    """The bytes of the tensors inside ``obj`` (dicts, lists, tuples), each storage counted once;
    a sharded ``DTensor`` counts its local shard, which is what this process writes."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in _tensors(obj):
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if local.device.type == "meta":
            continue
        key = (local.untyped_storage().data_ptr(), local.untyped_storage().nbytes())
        if key in seen and key[0] != 0:
            continue
        seen.add(key)
        total += local.untyped_storage().nbytes()
    return total


def _tensors(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def snapshot_bytes(snapshot: Snapshot) -> int:
    """What this process is about to write for ``snapshot``, tensors plus a fixed overhead."""
    parts: list[Any] = [snapshot.weights, snapshot.optimizer_states, snapshot.gradients]
    if snapshot.is_writer:
        parts += [snapshot.scheduler_states, snapshot.scaler_state, snapshot.custom_states]
    return sum(tensor_bytes(part) for part in parts) + OVERHEAD_BYTES


def check_free_space(snapshot: Snapshot) -> None:
    """Raise :class:`CheckpointError` when the checkpoint's filesystem can't hold this process's
    files (before anything is written)."""
    needed = snapshot_bytes(snapshot)
    free = free_bytes(snapshot.temporary)
    if needed > free:
        raise CheckpointError(
            f"save_state needs about {_megabytes(needed)} for rank {snapshot.rank}'s files in "
            f"{snapshot.target.parent}, and its filesystem has {_megabytes(free)} free; nothing "
            "was written. Free some space or save to another output_dir."
        )


def free_bytes(folder: Path) -> int:
    """Free bytes on the filesystem of the existing folder ``folder`` (the checkpoint's
    temporary folder, created before the check)."""
    return shutil.disk_usage(folder).free


def _megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"
