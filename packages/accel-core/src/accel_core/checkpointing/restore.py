"""``load_state``: read a checkpoint (ours or Hugging Face Accelerate's), check it, restore it.

Everything is read and checked before anything changes: the manifest's sizes and checksums, the
number of models, optimizers, schedulers and registered objects, the world size, and (in the
strategy) every key and shape. Then models and optimizers are loaded by the strategy, then
schedulers, the scaler, registered objects, loader positions and, last, the random states.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from accel_core.checkpointing import global_batch, names, rng_states, safe_load
from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.folder_io import CheckpointReader
from accel_core.checkpointing.manifest import Manifest, checksum_share
from accel_core.data_loader.progress import ResumePoint

if TYPE_CHECKING:
    from accel_core.checkpointing.checkpointer import Checkpointer
    from accel_core.prepared_objects import PreparedObjects, Stateful

logger = logging.getLogger(__name__)


def open_checked(
    checkpointer: Checkpointer, folder: Path, weights_only: bool, verified: bool = False
) -> CheckpointReader:
    """The reader of ``folder``, once its manifest's sizes and checksums hold on every process
    (every process calls it).

    Each process checks its share; then every process meets (a process that skipped
    ``load_state`` is an error naming it, see :mod:`.rendezvous`) and learns what the others
    found, so a damaged file is an error on every process. ``verified``: the files were checked
    already, as they were downloaded (a checkpoint at a URL, see :mod:`.remote_checkpoints`).
    """
    found = manifest = None
    try:
        manifest = Manifest.read(folder)
    except CheckpointError as caught:  # unreadable here: the others learn it at the meeting
        found = str(caught)
    reader = CheckpointReader(folder, manifest, weights_only=weights_only)
    if manifest is not None and not verified:
        state = checkpointer.state
        found = _verify_share(manifest, reader, state.local_process_index, state.num_processes)
    reports = checkpointer.meet("load_state", found)
    if reports:
        raise CheckpointError(reports[0])
    if manifest is not None:
        reader.mark_verified(sorted(manifest.files))
    _global_batch_plan(checkpointer, folder, manifest)  # refuses before anything is loaded
    return reader


def _global_batch_plan(
    checkpointer: Checkpointer, folder: Path, manifest: Manifest | None
) -> global_batch.GlobalBatchPlan | None:
    """With ``keep_global_batch``: how this checkpoint continues here (see :mod:`.global_batch`);
    ``None`` without the option or when nothing changes."""
    if not global_batch.enabled(checkpointer.project_configuration.keep_global_batch):
        return None
    state = checkpointer.state
    return global_batch.plan(
        folder,
        manifest,
        manifest.world_size if manifest is not None else _accelerate_world(folder),
        list(checkpointer.prepared.dataloaders),
        world_size=state.num_processes,
        accumulation_steps=checkpointer.accumulation.gradient_state.num_steps,
        handles_accumulation=checkpointer.strategy.accumulation.owned_by_engine,
    )


def load(
    checkpointer: Checkpointer,
    reader: CheckpointReader,
    models: list[Any],
    map_location: Any,
    strict: bool,
) -> int | None:
    """Restore the checkpoint of ``reader`` (from :func:`open_checked`) into ``checkpointer``'s
    prepared objects (every process calls it); returns the saved step (None if not saved), for
    the caller to set."""
    folder, manifest = reader.root, reader.manifest
    prepared, strategy, scaler = checkpointer.prepared, checkpointer.strategy, checkpointer.scaler
    rank, world_size = checkpointer.state.process_index, checkpointer.state.num_processes
    _check_counts(prepared, reader)
    scheduler_states = [
        reader.read_object(names.scheduler_file(i)) for i in range(len(prepared.schedulers))
    ]
    scaler_state = None
    if scaler is not None and reader.exists(names.SCALER):
        scaler_state = reader.read_object(names.SCALER)
    custom_states = [
        reader.read_object(names.custom_file(i), "cpu") for i in range(len(prepared.custom_objects))
    ]
    saved_world = manifest.world_size if manifest is not None else _accelerate_world(folder)
    rng = None
    if reader.exists(names.rng_file(rank)):
        rng = reader.read_object(names.rng_file(rank))
    # The step and the loader positions are the same on every rank: a rank the checkpoint has no
    # file for (more processes now) takes them from rank 0's.
    shared = rng
    if shared is None and reader.exists(names.rng_file(0)):
        shared = reader.read_object(names.rng_file(0))
    loader_states = [
        reader.read_object(names.loader_state_file(i))
        if getattr(loader, "use_stateful_dataloader", False)
        and reader.exists(names.loader_state_file(i))
        else None
        for i, loader in enumerate(prepared.dataloaders)
    ]
    gradients = [
        reader.read_tensors(names.gradients_file(i, rank))
        if reader.exists(names.gradients_file(i, rank))
        else None
        for i in range(len(models))
    ]
    samplers = [
        safe_load.load_accelerate_sampler(reader.path(names.sampler_file(i)))
        if manifest is None and reader.path(names.sampler_file(i)).is_file()
        else None
        for i in range(len(prepared.dataloaders))
    ]

    plan = _global_batch_plan(checkpointer, folder, manifest)

    strategy.checkpoint_io.load_checkpoint(
        reader, models, prepared.optimizers, map_location=map_location, strict=strict
    )
    for model, saved in zip(models, gradients, strict=True):
        strategy.accumulation.restore_accumulated_gradients(model, saved)
    for scheduler, state in zip(prepared.schedulers, scheduler_states, strict=True):
        scheduler.load_state_dict(state)
    if scaler is not None and scaler_state is not None:
        scaler.load_state_dict(scaler_state)
    for obj, state in zip(prepared.custom_objects, custom_states, strict=True):
        obj.load_state_dict(state)
    if manifest is not None:
        strategy.checkpoint_io.load_extra_state(manifest.strategy_state)
        checkpointer.tracking.resume(manifest.trackers)
    if saved_world != world_size and rank == 0 and plan is None:
        unused = list(range(world_size, saved_world))
        warnings.warn(
            f"load_state: {folder} was saved by {saved_world} process(es) and is loaded on "
            f"{world_size}: models, optimizers, schedulers and registered objects are restored"
            + (f"; the random states of rank(s) {unused} are not used" if unused else "")
            + ".",
            stacklevel=4,
        )
    if rng is None:
        warnings.warn(
            f"load_state: {folder} has no {names.rng_file(rank)} (it was saved by {saved_world} "
            f"process(es), this is rank {rank} of {world_size}); this process keeps its random "
            "states and takes the step and loader positions from rank 0's file.",
            stacklevel=4,
        )
    if shared is None:
        return None
    step = int(shared["step"]) if "step" in shared else None
    positions = shared.get("accel_dataloaders") or []
    if plan is not None:
        plan.apply(checkpointer.accumulation.gradient_state, prepared.schedulers)
        step = plan.step(step) if step is not None else None
        if rank == 0:
            warnings.warn(plan.describe(folder), stacklevel=4)
    if rng is not None:
        rng_states.restore(rng)
    for index, loader in enumerate(prepared.dataloaders):
        # At an epoch boundary a loader that tracks its progress starts the next epoch fresh
        # (its batch count says so); the others' saved state marks the epoch finished itself.
        at_boundary = (
            getattr(loader, "progress", None) is not None
            and index < len(positions)
            and not positions[index].get("batches")
        )
        saved_state = loader_states[index]
        if saved_state is not None and not at_boundary:
            cast("Stateful", loader).load_state_dict(saved_state)  # a StatefulDataLoader
        if samplers[index] is not None:
            _apply_accelerate_sampler(loader, samplers[index])
        if index < len(positions):
            position = positions[index]
            if plan is not None:
                position = {**position, "batches": plan.batches(index, position.get("batches", 0))}
            _restore_position(
                loader, position, rng, saved_world, world_size, index, plan is not None
            )
    return step


def _verify_share(
    manifest: Manifest, reader: CheckpointReader, local_rank: int, world_size: int
) -> str | None:
    """Check this process's share of the checkpoint before anything is read into the model;
    what is wrong, or ``None``.

    Each process checks every size, and the checksums of its share of the blocks of all files
    (the processes of a node share its disk, so they split the bytes evenly between them), on
    as many threads as its share of the cores (1 process on 2 cores: 2 threads, half the time;
    2 processes on 2 cores: 1 each). The caller exchanges the results.
    """
    local_world = max(1, min(world_size, int(os.environ.get("LOCAL_WORLD_SIZE", world_size))))
    mine = checksum_share(manifest, local_rank, local_world)
    try:
        manifest.verify(reader.root, blocks=mine, threads=hashing_threads(local_world))
    except CheckpointError as caught:
        return str(caught)
    return None


MAX_HASHING_THREADS = 8
"""Threads per process for the checksums: one core reads about 15 GB/s, so 8 of them reach what
the memory of a large server delivers."""


def hashing_threads(local_world: int) -> int:
    """Threads each of a node's ``local_world`` processes hashes with: its share of the cores
    this process may run on (at least 1, at most :data:`MAX_HASHING_THREADS`).

    The share errs low where a launcher pinned each process to cores of its own (they are
    divided again): too few threads cost time, too many would compete with the other processes.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(MAX_HASHING_THREADS, cores // max(1, local_world)))


def _check_counts(prepared: PreparedObjects, reader: CheckpointReader) -> None:
    folder = reader.root
    found = sorted(
        int(m.group(1))
        for p in folder.iterdir()
        if (m := names.CUSTOM_PATTERN.match(p.name)) is not None
    )
    if len(found) != len(prepared.custom_objects):
        raise CheckpointError(
            f"checkpoint {folder} has {len(found)} custom_checkpoint_<i>.pkl file(s), but "
            f"{len(prepared.custom_objects)} object(s) are registered with "
            "register_for_checkpointing; register the same objects, in the same order, as when "
            "it was saved."
        )
    for index in range(len(prepared.schedulers)):
        if not reader.exists(names.scheduler_file(index)):
            raise CheckpointError(
                f"checkpoint {folder} has no {names.scheduler_file(index)} for prepared scheduler "
                f"{index}: it was saved with fewer prepared schedulers."
            )


def _accelerate_world(folder: Path) -> int:
    return len(list(folder.glob("random_states_*.pkl")))


def _restore_position(
    loader: Any,
    position: dict[str, Any],
    rng: dict[str, Any] | None,
    saved_world: int,
    world_size: int,
    index: int,
    regrouped: bool = False,
) -> None:
    """Set ``loader``'s epoch and generator from ``position``, and leave its resume point.

    ``regrouped``: keep_global_batch mapped ``position`` to this number of processes (its
    ``batches`` hold the saved samples here), so the resume point is left on every rank.
    """
    epoch, batches = int(position["epoch"]), int(position.get("batches", 0))
    progress = getattr(loader, "progress", None)
    generator = getattr(loader, "synchronized_generator", None)
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    if progress is None:
        return
    if generator is not None and position.get("generator_state") is not None:
        # The epoch-start state (or, at a boundary, the next epoch's): the same on every rank.
        generator.set_state(position["generator_state"])
    if regrouped and batches:
        progress.resume = ResumePoint(
            epoch=epoch,
            batches=batches,
            generator_state=position.get("generator_state"),
            torch_state=position.get("torch_state") if rng is not None else None,
            rng_states=rng,
        )
        return
    if (saved_world != world_size or rng is None) and batches:
        global_batches = batches * saved_world
        per_process = global_batches / world_size
        hint = (
            f"skip_first_batches(loader, {int(per_process)}) skips the same samples"
            if per_process.is_integer()
            else "no whole number of batches per process covers them, so the rest of that epoch "
            "can't be continued exactly"
        )
        warnings.warn(
            f"load_state: data loader {index} was saved by {_processes(saved_world)} after "
            f"{batches} batch(es) per process of epoch {epoch} ({global_batches} in all); on "
            f"{_processes(world_size)} that is {per_process:g} per process: {hint}. The epoch's "
            "global order is restored; the random states of the processes are not mapped.",
            stacklevel=5,
        )
        return
    if batches == 0 or rng is None:
        return
    progress.resume = ResumePoint(
        epoch=epoch,
        batches=batches,
        generator_state=position.get("generator_state"),
        torch_state=position.get("torch_state"),
        rng_states=rng,
    )


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def _apply_accelerate_sampler(loader: Any, record: safe_load.AccelerateSamplerRecord) -> None:
    sampler = loader.get_sampler() if hasattr(loader, "get_sampler") else None
    if sampler is None or not hasattr(sampler, "initial_seed"):
        return
    sampler.initial_seed = int(getattr(record, "initial_seed", sampler.initial_seed))
    epoch = int(getattr(record, "epoch", 0))
    generator = getattr(record, "generator", None)
    if generator is not None and sampler.generator is not None:
        sampler.generator.set_state(generator.get_state())
    loader.set_epoch(epoch)
