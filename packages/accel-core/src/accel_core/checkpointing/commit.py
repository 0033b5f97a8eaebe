"""Writing a :class:`~accel_core.checkpointing.snapshot.Snapshot` and making it the checkpoint.

On every process: write this process's files into the temporary folder, then tell the writers
what was written (or what failed). The writer of each node writes the manifest and renames the
folder into place only if every process succeeded; then everyone returns. A failure on any
process is raised on every process, the partial folder is removed, and the previous checkpoint is
untouched. Before writing, each process checks that the filesystem has room for its files
(:mod:`~accel_core.checkpointing.disk_space`). For a checkpoint at a URL (see
:mod:`~accel_core.checkpointing.object_storage`) the temporary folder is each machine's local
staging folder, every process uploads its files as they are written, and the main process stores
the manifest last instead of the rename.
"""

from __future__ import annotations

import logging
import shutil
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from accel_core.checkpointing import disk_space, folders, names, object_storage
from accel_core.checkpointing.errors import CheckpointError, failure_text
from accel_core.checkpointing.folder_io import CheckpointWriter
from accel_core.checkpointing.object_storage import RemoteFolder
from accel_core.checkpointing.object_transfers import Uploader
from accel_core.checkpointing.snapshot import Snapshot

if TYPE_CHECKING:
    from accel_core.strategies import Strategy

logger = logging.getLogger(__name__)


def write_and_commit(snapshot: Snapshot, strategy: Strategy, group: Any = None) -> None:
    """Write ``snapshot`` and rename it into place, or for a URL upload it and store its
    manifest last (a collective over ``group``)."""
    remote = snapshot.target if isinstance(snapshot.target, RemoteFolder) else None
    writer = CheckpointWriter(
        snapshot.temporary,
        snapshot.rank,
        snapshot.world_size,
        snapshot.is_writer,
        uploader=Uploader(snapshot.temporary, remote) if remote is not None else None,
        group=group,
    )
    error = None
    records: dict[str, Any] = {}
    try:
        snapshot.temporary.mkdir(parents=True, exist_ok=True)
        disk_space.check_free_space(snapshot)
        _write(snapshot, strategy, writer)
        records = writer.finish()
    except Exception as caught:  # reported to every process below, then raised
        error = f"rank {snapshot.rank}: {failure_text(caught)}"
        logger.error("save_state failed on rank %d", snapshot.rank, exc_info=True)
    finally:
        writer.close()
    reports = _exchange((snapshot.node, records, error), snapshot.world_size, group)
    errors = [failure for _, _, failure in reports if failure is not None]
    if not errors and snapshot.is_writer:
        for node, records, _ in reports:
            if remote is not None or node == snapshot.node or snapshot.world_size == 1:
                snapshot.manifest.files.update(records)
            else:  # another machine's files: listed when they are here (a shared filesystem)
                snapshot.manifest.files.update(
                    {name: record for name, record in records.items() if _here(snapshot, name)}
                )
        try:
            if remote is not None:
                _store_manifest(snapshot, remote)
            else:
                snapshot.manifest.write(snapshot.temporary)
                folders.move_into_place(snapshot.temporary, snapshot.target)
                if snapshot.total_limit is not None and snapshot.checkpoints_dir is not None:
                    snapshot.removed = folders.prune(snapshot.checkpoints_dir, snapshot.total_limit)
        except (OSError, *_storage_errors(remote)) as caught:
            errors.append(f"rank {snapshot.rank}: {failure_text(caught)}")
    # The writers' rename is the last step: the second exchange tells everyone how it went.
    errors += [e for e in _exchange(errors[0] if errors else None, snapshot.world_size, group) if e]
    if remote is not None and snapshot.cleans_staging:  # this machine's uploads are all done
        object_storage.remove_staging(snapshot.temporary)
    if errors:
        if snapshot.is_writer:  # every process is past its writes: drop the partial folder
            shutil.rmtree(snapshot.temporary, ignore_errors=True)
            if remote is not None:
                _remove_partial(remote)
        raise CheckpointError(
            f"save_state could not write {snapshot.target}; the previous checkpoint is "
            f"unchanged. {errors[0]}"
        )


def _store_manifest(snapshot: Snapshot, remote: RemoteFolder) -> None:
    """The last write of a checkpoint at a URL: from now on it is complete; then rotation."""
    object_storage.write_text(remote, names.MANIFEST, snapshot.manifest.to_json())
    checkpoints = snapshot.checkpoints_dir
    if snapshot.total_limit is not None and isinstance(checkpoints, RemoteFolder):
        snapshot.removed = list(object_storage.prune(checkpoints, snapshot.total_limit))


def _storage_errors(remote: RemoteFolder | None) -> tuple[type[BaseException], ...]:
    # An object store's client raises its own errors (botocore's, ...), not only OSError.
    return (Exception,) if remote is not None else ()


def _remove_partial(remote: RemoteFolder) -> None:
    try:
        object_storage.remove(remote)
    except Exception:  # the folder has no manifest: it never counts as a checkpoint anyway
        logger.warning("could not remove the incomplete checkpoint %s", remote, exc_info=True)


def _here(snapshot: Snapshot, name: str) -> bool:
    return (snapshot.temporary / name).is_file()


def _write(snapshot: Snapshot, strategy: Strategy, writer: CheckpointWriter) -> None:
    strategy.checkpoint_io.save_checkpoint(
        writer,
        snapshot.weights,
        snapshot.optimizer_states,
        safe_serialization=snapshot.safe_serialization,
    )
    if writer.is_writer:
        for index, state in enumerate(snapshot.scheduler_states):
            writer.write_object(names.scheduler_file(index), state)
        if snapshot.scaler_state is not None:
            writer.write_object(names.SCALER, snapshot.scaler_state)
        for index, state in enumerate(snapshot.custom_states):
            writer.write_object(names.custom_file(index), state)
        for index, state in enumerate(snapshot.loader_states):
            if state is not None:
                writer.write_object(names.loader_state_file(index), state)
    for index, gradients in enumerate(snapshot.gradients):
        if gradients:
            writer.write_tensors(names.gradients_file(index, snapshot.rank), gradients)
    writer.write_object(names.rng_file(snapshot.rank), snapshot.rng)


def _exchange(item: Any, world_size: int, group: Any) -> list[Any]:
    """``item`` from every process (no hang records: this may run in a background thread)."""
    if world_size == 1:
        return [item]
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, item, group=group)
    return everyone
