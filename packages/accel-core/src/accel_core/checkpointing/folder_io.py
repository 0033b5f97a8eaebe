"""What a strategy writes a checkpoint through, and reads it back from, on every process.

A :class:`CheckpointWriter` points at the temporary folder of a checkpoint being written. Files
written through it are recorded (size, block checksums, rank) for the manifest; an engine that
writes files itself (torch.distributed.checkpoint, DeepSpeed) writes under
:meth:`CheckpointWriter.path` and calls :meth:`CheckpointWriter.record` for them. A
:class:`CheckpointReader` reads a finished checkpoint, checking each file against the manifest
before it is used.

Checksums stay off the writing path where they can: a ``torch.save`` file's block checksums are
computed from the bytes as they are written; a file written by someone else (safetensors, an
engine) is read back for them on a helper thread while the next file is written;
:meth:`CheckpointWriter.finish` waits for them. For a checkpoint at a URL, the files written
through :meth:`~CheckpointWriter.write_object` and :meth:`~CheckpointWriter.write_tensors` stream
straight into the store (the same bytes); the root is a local staging folder for the files an
engine writes itself, each of which, once recorded and checksummed, is uploaded (and deleted) by
an :class:`~accel_core.checkpointing.object_transfers.Uploader` while the next one is written.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from accel_core.checkpointing import safe_load
from accel_core.checkpointing.errors import CheckpointError, failure_text
from accel_core.checkpointing.manifest import (
    BlockChecksums,
    FileRecord,
    Manifest,
    file_block_checksums,
)
from accel_core.checkpointing.object_transfers import Uploader, open_upload


class CheckpointWriter:
    """The folder a checkpoint is being written into, as one process sees it.

    Attributes:
        root: the temporary folder (renamed to the final name once every process has finished).
        rank, world_size: this process and the number of processes.
        is_writer: whether this process writes the files shared by all ranks (the main process, or
            each node's local main with ``save_on_each_node``).
        records: the files this process wrote, by name (complete once :meth:`finish` returned).
        group: the process group a strategy's own collectives while writing must use (DCP's
            ``process_group``): ``None`` (the default group) for ``save_state``, the background
            saver's gloo group for ``save_state(async_save=True)``, which writes beside training.
    """

    def __init__(
        self,
        root: Path,
        rank: int,
        world_size: int,
        is_writer: bool,
        *,
        uploader: Uploader | None = None,
        group: Any = None,
    ) -> None:
        self.root = root
        self.rank = rank
        self.world_size = world_size
        self.is_writer = is_writer
        self.group = group
        #: for a checkpoint at a URL: sends each file on once it is complete (and checksummed)
        self.uploader = uploader
        self.records: dict[str, FileRecord] = {}
        self._checksums: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    def path(self, name: str) -> Path:
        """Where the file (or folder) ``name`` goes."""
        return self.root / name

    def record(self, name: str) -> None:
        """Add a file written directly under :meth:`path` (or every file of a folder) to the
        manifest. Its block checksums are computed on a helper thread; :meth:`finish` waits."""
        target = self.path(name)
        paths = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
        for path in paths:
            self._pending.append(self._helpers().submit(self._record_now, path))

    def _record_now(self, path: Path) -> None:
        relative = path.relative_to(self.root).as_posix()
        size = path.stat().st_size
        self.records[relative] = FileRecord(size, file_block_checksums(path), self.rank)
        if self.uploader is not None:
            self.uploader.add(relative)

    def write_tensors(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Write a dict of tensors with safetensors (shared storages written once)."""
        from safetensors.torch import save_file

        from accel_core.serialization import clean_state_dict_for_safetensors

        path = self.path(name)
        if self.uploader is not None:  # a URL: the same bytes, streamed into the store
            cleaned = clean_state_dict_for_safetensors(tensors)
            # on an upload thread, while this one serializes the next file (finish() waits)
            self.uploader.run(self._stream_tensors, name, cleaned)
            return
        try:
            save_file(clean_state_dict_for_safetensors(tensors), path, {"format": "pt"})
        except Exception as caught:
            raise CheckpointError(f"writing {path} failed: {failure_text(caught)}") from caught
        self.record(name)

    def _stream_tensors(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        from accel_core.checkpointing.safetensors_stream import write_safetensors

        try:
            with self._open_for_writing(name) as handle:
                stream = _ChecksummedFile(handle)
                write_safetensors(tensors, stream, {"format": "pt"})
        except Exception as caught:
            raise CheckpointError(
                f"writing {self.path(name)} failed: {failure_text(caught)}"
            ) from caught
        self.records[name] = FileRecord(stream.size, stream.checksums.digests(), self.rank)

    def write_object(self, name: str, obj: Any) -> None:
        """Write ``obj`` with ``torch.save`` (its block checksums computed from the bytes
        written)."""
        path = self.path(name)
        try:
            with self._open_for_writing(name) as handle:
                stream = _ChecksummedFile(handle)
                torch.save(obj, stream)
        except Exception as caught:
            raise CheckpointError(f"writing {path} failed: {failure_text(caught)}") from caught
        self.records[name] = FileRecord(stream.size, stream.checksums.digests(), self.rank)

    def _open_for_writing(self, name: str) -> Any:
        """The local file ``name``, or for a checkpoint at a URL the object itself: the file is
        streamed into it (in parts, while it serializes), with no local copy."""
        if self.uploader is None:
            return open(self.path(name), "wb")
        target = self.uploader.target
        return open_upload(target.fs, target.file(name))

    def finish(self) -> dict[str, FileRecord]:
        """Wait for the checksums still being computed; the records of every file written.

        Raises the first error of a checksum (a file that vanished or can't be read).
        """
        try:
            for future in self._pending:
                future.result()
            if self.uploader is not None:
                self.uploader.finish()
        finally:
            self.close()
        return self.records

    def close(self) -> None:
        """Stop the helper threads (after the checksums and uploads they are doing)."""
        if self._checksums is not None:
            self._checksums.shutdown(wait=True)
            self._checksums = None
        if self.uploader is not None:
            self.uploader.close()
        self._pending.clear()

    def _helpers(self) -> ThreadPoolExecutor:
        if self._checksums is None:
            self._checksums = ThreadPoolExecutor(1, thread_name_prefix="accel-checksum")
        return self._checksums


class _ChecksummedFile:
    """A binary file for ``torch.save`` that computes the block checksums of the bytes written
    to it (XXH3 runs at tens of GB/s: inline costs less than a handoff to another thread)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.checksums = BlockChecksums()
        self.size = 0

    def write(self, data: Any) -> int:
        self.checksums.update(data)
        self.size += memoryview(data).nbytes
        return self._handle.write(data)

    def flush(self) -> None:
        self._handle.flush()


class CheckpointReader:
    """A finished checkpoint folder, read by one process.

    Attributes:
        root: the checkpoint folder.
        manifest: its manifest, or ``None`` for a checkpoint written by Hugging Face Accelerate.
        weights_only: ``torch.load``'s setting (``False`` only when the caller opted in).
    """

    def __init__(self, root: Path, manifest: Manifest | None, weights_only: bool = True) -> None:
        self.root = root
        self.manifest = manifest
        self.weights_only = weights_only
        self._verified: set[str] = set()

    def path(self, name: str) -> Path:
        """Where the file (or folder) ``name`` is."""
        return self.root / name

    def exists(self, name: str) -> bool:
        """Whether ``name`` is in the checkpoint."""
        if self.manifest is not None:
            return name in self.manifest.files
        return self.path(name).exists()

    def mark_verified(self, names: list[str]) -> None:
        """Record that ``names`` were checked already (by :func:`.restore.open_checked`)."""
        self._verified.update(names)

    def verify(self, name: str) -> None:
        """Check ``name`` against the manifest (size and checksum) once; raise if it differs."""
        if self.manifest is not None and name not in self._verified:
            if name not in self.manifest.files:
                raise CheckpointError(
                    f"checkpoint {self.root} has no {name} (its manifest lists "
                    f"{', '.join(sorted(self.manifest.files)) or 'no files'})."
                )
            self.manifest.verify(self.root, [name])
            self._verified.add(name)
        elif not self.path(name).is_file():
            raise CheckpointError(f"checkpoint {self.root} has no {name}.")

    def read_tensors(self, name: str, device: str = "cpu") -> dict[str, torch.Tensor]:
        """A safetensors file as a dict of tensors on ``device``."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        self.verify(name)
        try:
            return load_file(self.path(name), device=device)
        except (SafetensorError, OSError) as error:
            raise CheckpointError(
                f"checkpoint file {self.path(name)} can't be read: it is truncated or corrupt "
                f"({error})."
            ) from None

    def read_object(self, name: str, map_location: Any = "cpu", mmap: bool = False) -> Any:
        """A ``torch.save`` file, through ``torch.load(weights_only=True)`` and the allow-list
        (``mmap=True``: its tensors mapped from the file, see :func:`safe_load.load_object`)."""
        self.verify(name)
        return safe_load.load_object(self.path(name), map_location, self.weights_only, mmap=mmap)


def fsync_folder(folder: Path) -> None:
    """Make the folder's entries (renames) durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
