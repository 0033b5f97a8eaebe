"""Everything a checkpoint holds, taken from the live objects at ``save_state`` time.

With ``async_save`` every tensor is copied to CPU (pinned memory on CUDA) so training can go on
changing the originals while a background thread writes the copy.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from accel_core.checkpointing import global_batch, rng_states
from accel_core.checkpointing.manifest import Manifest, library_versions
from accel_core.checkpointing.object_storage import RemoteFolder
from accel_core.strategies.checkpoint_io import CheckpointIO
from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_core.checkpointing.checkpointer import Checkpointer
    from accel_core.prepared_objects import Stateful


@dataclass
class Snapshot:
    """The states of one checkpoint, and where they go."""

    target: Path | RemoteFolder
    temporary: Path
    weights: list[dict[str, Any]]
    optimizer_states: list[dict[str, Any]]
    scheduler_states: list[dict[str, Any]]
    scaler_state: dict[str, Any] | None
    custom_states: list[dict[str, Any]]
    loader_states: list[dict[str, Any] | None]
    gradients: list[dict[str, torch.Tensor]]
    rng: dict[str, Any]
    manifest: Manifest
    safe_serialization: bool
    rank: int
    world_size: int
    is_writer: bool
    node: int
    total_limit: int | None = None
    checkpoints_dir: Path | RemoteFolder | None = None
    removed: list[Path | RemoteFolder] = field(default_factory=list)
    #: for a URL: this process deletes its machine's staging folder once the save is done
    cleans_staging: bool = False


def take(
    checkpointer: Checkpointer,
    target: Path | RemoteFolder,
    temporary: Path,
    weights: list[dict[str, Any]],
    safe_serialization: bool,
    copy: bool,
    staging: dict[str, Any] | None = None,
) -> Snapshot:
    """Read every state of ``checkpointer``'s objects now; with ``copy`` the tensors are CPU
    copies owned by the snapshot, written into ``staging`` (the copies of the previous
    asynchronous save) where they fit."""
    strategy = checkpointer.strategy
    prepared = checkpointer.prepared
    loaders = prepared.dataloaders
    step = checkpointer.accumulation.step
    step_count = checkpointer.accumulation.gradient_state.num_steps
    schedulers = list(prepared.schedulers)
    rng = rng_states.capture(step)
    rng["accel_dataloaders"] = [_loader_position(loader) for loader in loaders]
    state = checkpointer.state
    scaler = checkpointer.scaler
    # An object store is one place for every machine: only the main process writes shared files.
    on_each_node = checkpointer.project_configuration.save_on_each_node and not isinstance(
        target, RemoteFolder
    )
    snapshot = Snapshot(
        target=target,
        temporary=temporary,
        weights=weights,
        optimizer_states=strategy.checkpoint_io.checkpoint_optimizer_states(prepared.optimizers),
        scheduler_states=[scheduler.state_dict() for scheduler in prepared.schedulers],
        scaler_state=scaler.state_dict() if scaler is not None else None,
        custom_states=[obj.state_dict() for obj in prepared.custom_objects],
        loader_states=[
            cast("Stateful", loader).state_dict()  # a StatefulDataLoader's
            if getattr(loader, "use_stateful_dataloader", False)
            else None
            for loader in loaders
        ],
        gradients=_accumulated_gradients(checkpointer),
        rng=rng,
        manifest=Manifest(
            world_size=state.num_processes,
            step=step,
            iteration=checkpointer.save_iteration,
            strategy=strategy.name,
            libraries=library_versions(),
            models=[
                {"class": type(extract_model_from_parallel(m, True, True)).__name__}
                for m in prepared.models
            ],
            dataloaders=[
                _loader_summary(loader, global_batch.run_numbers(step_count, schedulers))
                for loader in loaders
            ],
            custom_objects=[type(obj).__name__ for obj in prepared.custom_objects],
            trackers=checkpointer.tracking.run_states(),
            strategy_state=strategy.checkpoint_io.checkpoint_extra_state(),
        ),
        safe_serialization=safe_serialization,
        rank=state.process_index,
        world_size=state.num_processes,
        is_writer=state.is_local_main_process if on_each_node else state.is_main_process,
        node=state.process_index - state.local_process_index,
    )
    writes = type(strategy.checkpoint_io).save_checkpoint
    if not snapshot.is_writer and writes is CheckpointIO.save_checkpoint:
        # The default save_checkpoint writes models and optimizers from the writers only.
        snapshot.weights, snapshot.optimizer_states = [], []
    if copy:
        earlier = staging or {}
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        for name in STAGED_FIELDS:
            copied = copy_to_cpu(getattr(snapshot, name), earlier.get(name), pending=pending)
            setattr(snapshot, name, copied)
        run_copies(pending)
    return snapshot


#: Copies into kept CPU buffers run on this many threads (``copy_`` releases the GIL): memory
#: bandwidth, not one core, is then the limit while the other processes wait at the save.
COPY_THREADS = 2


def run_copies(pending: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Do each ``(destination, source)`` copy, split by bytes over :data:`COPY_THREADS` threads."""
    if len(pending) < 2:
        for destination, source in pending:
            destination.copy_(source)
        return
    shares: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(COPY_THREADS)]
    loads = [0] * COPY_THREADS
    for pair in sorted(pending, key=lambda p: -p[1].numel() * p[1].element_size()):
        least = loads.index(min(loads))
        shares[least].append(pair)
        loads[least] += pair[1].numel() * pair[1].element_size()

    def copy_share(share: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for destination, source in share:
            destination.copy_(source)

    with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="accel-stage") as pool:
        list(pool.map(copy_share, shares))


#: The snapshot fields an asynchronous save copies (and keeps, to copy into next time).
STAGED_FIELDS = (
    "weights",
    "optimizer_states",
    "scheduler_states",
    "scaler_state",
    "custom_states",
    "loader_states",
    "gradients",
)


def staged(snapshot: Snapshot) -> dict[str, Any]:
    """The copies an asynchronous save made, to be reused by the next one."""
    return {name: getattr(snapshot, name) for name in STAGED_FIELDS}


def _accumulated_gradients(checkpointer: Checkpointer) -> list[dict[str, torch.Tensor]]:
    """Each model's gradients, when the checkpoint falls inside an accumulation cycle."""
    if not checkpointer.accumulation.in_cycle():
        return []
    strategy = checkpointer.strategy
    return [
        strategy.accumulation.accumulated_gradients(model) for model in checkpointer.prepared.models
    ]


def _loader_position(loader: Any) -> dict[str, Any]:
    progress = getattr(loader, "progress", None)
    if progress is None:
        return {"epoch": int(getattr(loader, "iteration", 0)), "batches": 0}
    at_end = bool(getattr(loader, "end_of_dataloader", False))
    return progress.state_dict(getattr(loader, "synchronized_generator", None), at_end)


def _loader_summary(loader: Any, run: dict[str, Any]) -> dict[str, Any]:
    progress = getattr(loader, "progress", None)
    position = _loader_position(loader)
    return {
        "class": type(loader).__name__,
        "epoch": int(getattr(loader, "iteration", 0)),
        "batches": progress.batches if progress is not None and progress.in_epoch else 0,
        "total_batch_size": _total_batch_size(loader),
        "stateful": bool(getattr(loader, "use_stateful_dataloader", False)),
        # where the next iteration starts and how a step is made: what keep_global_batch reads
        "resume": {
            "epoch": int(position["epoch"]),
            "batches": int(position["batches"]),
            "sampler": global_batch.sampler_name(loader),
            **run,
        },
    }


def _total_batch_size(loader: Any) -> int | None:
    try:
        return int(loader.total_batch_size)
    except (AttributeError, TypeError, NotImplementedError):
        return None


def copy_to_cpu(
    value: Any,
    reuse: Any = None,
    memo: dict[tuple, torch.Tensor] | None = None,
    pending: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> Any:
    """A deep copy of ``value`` whose tensors are detached CPU copies (pinned for CUDA ones).

    ``reuse`` is an earlier copy of the same structure: tensors of the same shape and dtype are
    copied into it instead of into new memory (no page faults, no pinning). Views of one storage
    (tied weights) stay one copy. A DTensor keeps its mesh and placements: only its local
    shard is copied. With ``pending``, the copies of CPU tensors into ``reuse`` are
    appended to it as ``(destination, source)`` instead of done: the caller runs them
    (:func:`run_copies`) before using the result.
    """
    memo = {} if memo is None else memo
    if _is_dtensor(value):
        return _copy_dtensor(value, reuse, memo, pending)
    if isinstance(value, torch.Tensor):
        key = _view_key(value)
        if key in memo:
            return memo[key]
        source = value.detach()
        if (
            isinstance(reuse, torch.Tensor)
            and reuse.device.type == "cpu"
            and reuse.shape == value.shape
            and reuse.dtype == value.dtype
        ):
            if pending is not None and value.device.type == "cpu":
                pending.append((reuse, source))
                copied = reuse
            else:
                copied = reuse.copy_(source, non_blocking=value.device.type == "cuda")
        elif value.device.type == "cuda":
            pinned = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            copied = pinned.copy_(source, non_blocking=True)
        else:
            copied = source.to("cpu", copy=True)
        memo[key] = copied
        return copied
    if isinstance(value, dict):
        earlier = reuse if isinstance(reuse, dict) else {}
        return type(value)(
            (key, copy_to_cpu(item, earlier.get(key), memo, pending)) for key, item in value.items()
        )
    if isinstance(value, (list, tuple)):
        earlier = reuse if isinstance(reuse, (list, tuple)) and len(reuse) == len(value) else None
        items = [
            copy_to_cpu(item, earlier[i] if earlier is not None else None, memo, pending)
            for i, item in enumerate(value)
        ]
        return items if isinstance(value, list) else tuple(items)
    return value


def _is_dtensor(value: Any) -> bool:
    # Checked by name: importing torch.distributed.tensor costs a second where nothing shards.
    return isinstance(value, torch.Tensor) and type(value).__name__ == "DTensor"


def _copy_dtensor(
    value: Any,
    reuse: Any,
    memo: dict[tuple, torch.Tensor],
    pending: list[tuple[torch.Tensor, torch.Tensor]] | None,
) -> Any:
    """A DTensor (FSDP2's shards) whose local shard is a CPU copy, with the same mesh,
    placements and global shape: what ``torch.distributed.checkpoint`` writes from. Nothing is
    gathered; an earlier copy with the same layout is copied into and returned again."""
    from torch.distributed.tensor import DTensor

    spec = value._spec
    earlier = reuse._local_tensor if _is_dtensor(reuse) and reuse._spec == spec else None
    local = copy_to_cpu(value._local_tensor, earlier, memo, pending)
    if earlier is not None and local is earlier:
        return reuse
    # The constructor, not DTensor.from_local: that would move a CPU copy back to a CUDA mesh.
    return DTensor(local, spec, requires_grad=False)


def _view_key(tensor: torch.Tensor) -> tuple:
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return (id(tensor),)
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )
