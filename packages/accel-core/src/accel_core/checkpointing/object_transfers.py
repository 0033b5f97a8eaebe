"""Moving a checkpoint's files to and from an object store (see :mod:`.object_storage`).

Uploads: a file accel serializes itself is streamed into its object as it is written
(:func:`open_upload`: parts sent in parallel on S3, see :mod:`.s3_transfers`; through the
filesystem's own file object elsewhere); a file an engine wrote into the local staging folder is
sent by the :class:`Uploader` as soon as it is recorded. Downloads (:func:`download`): every
file is fetched in ranges of whole checksum blocks, several ranges at once, each checked against
the manifest's block checksums as it arrives and written at its place in the local file, which
appears under its name only whole and checked.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.manifest import BlockChecksums, FileRecord
from accel_core.checkpointing.object_storage import RemoteFolder
from accel_core.checkpointing.s3_transfers import (
    PART_BYTES,
    S3PartUpload,
    S3RangeReader,
    is_s3,
)

#: Files (or ranges of files) moved at once by one process (a store serves many requests in
#: parallel).
TRANSFER_THREADS = 4
#: Bytes read at once while downloading, and handed at once to the sending thread of a streamed
#: upload.
CHUNK_BYTES = 8 << 20
#: Bytes of one download request (rounded down to whole checksum blocks): a file is one streamed
#: request per this many bytes, so a big file comes over several connections at once.
RANGE_BYTES = 256 << 20


class ObjectUpload(Protocol):
    """A binary file whose bytes become one object; leaving its context normally completes the
    object, leaving it by an exception abandons it (nothing appears)."""

    def write(self, data: Any) -> int: ...

    def __enter__(self) -> ObjectUpload: ...

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None: ...


def open_upload(fs: Any, path: str) -> ObjectUpload:
    """The object ``path`` of ``fs`` as a file to stream into (see :class:`ObjectUpload`)."""
    return PartsUpload(fs, path) if is_s3(fs) else StreamingUpload(fs, path)


class PartsUpload:
    """:class:`~.s3_transfers.S3PartUpload` as an :class:`ObjectUpload` (the writer's thread fills
    the parts; the event loop's thread sends them)."""

    def __init__(self, fs: Any, path: str) -> None:
        self._upload = S3PartUpload(fs, path)

    def write(self, data: Any) -> int:
        """Take ``data``; raises an earlier part's error."""
        return self._upload.write(data)

    def flush(self) -> None:
        """Nothing to do: the object is complete when the context is left."""

    def __enter__(self) -> PartsUpload:
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            try:
                self._upload.complete()
            except BaseException:
                self._upload.abort()
                raise
        else:
            self._upload.abort()


class StreamingUpload:
    """An :class:`ObjectUpload` through the filesystem's own file object: :meth:`write` hands
    the bytes (in slices of :data:`CHUNK_BYTES`) to a helper thread that sends them on, so
    serializing (``torch.save``) and uploading overlap; at most ``depth`` slices wait in
    between. An abandoned object store's multipart upload is dropped."""

    def __init__(self, fs: Any, path: str, depth: int = 4) -> None:
        self._handle = fs.open(path, "wb")
        self._slices: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._sender = threading.Thread(target=self._send, name="accel-stream", daemon=True)
        self._sender.start()

    def _send(self) -> None:
        while (piece := self._slices.get()) is not None:
            if self._error is None:  # after a failure, keep draining: the writer never blocks
                try:
                    self._handle.write(piece)
                except BaseException as error:  # raised in the writing thread, below
                    self._error = error

    def write(self, data: Any) -> int:
        """Queue ``data`` (copied, in slices) for the store; raises an earlier send's error."""
        if self._error is not None:
            raise self._error
        view = memoryview(data).cast("B")
        for start in range(0, len(view), CHUNK_BYTES):
            self._slices.put(bytes(view[start : start + CHUNK_BYTES]))
        return len(view)

    def flush(self) -> None:
        """Nothing to do: the object is complete when the context is left."""

    def __enter__(self) -> StreamingUpload:
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        self._slices.put(None)
        self._sender.join()
        if kind is None and self._error is None:
            self._handle.close()  # the last part, then the object is complete
            return
        discard = getattr(self._handle, "discard", None)
        if discard is not None:
            discard()  # drop the parts sent so far
        if kind is None and self._error is not None:
            raise self._error


class Uploader:
    """Uploads the files of a staging folder to a :class:`RemoteFolder` on helper threads, each
    as soon as it is handed over, deleting the local file once it is stored."""

    def __init__(self, staging: Path, target: RemoteFolder) -> None:
        self.staging = staging
        self.target = target
        self._pool = ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="accel-upload")
        self._pending: list[Any] = []

    def add(self, name: str) -> None:
        """Upload ``name`` (a file of the staging folder, ``/``-separated)."""
        self._pending.append(self._pool.submit(self._upload, name))

    def run(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` (a file streamed into the store) on an upload thread;
        :meth:`finish` waits for it and raises its error."""
        self._pending.append(self._pool.submit(function, *args))

    def _upload(self, name: str) -> None:
        local = self.staging / name
        with open(local, "rb") as source, open_upload(self.target.fs, self.target.file(name)) as up:
            while chunk := source.read(PART_BYTES):
                up.write(chunk)
        local.unlink()

    def finish(self) -> None:
        """Wait for every upload; raise the first failure."""
        try:
            for pending in self._pending:
                pending.result()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the helper threads once the uploads they started are done."""
        self._pool.shutdown(wait=True)


def download(
    source: RemoteFolder, records: Mapping[str, FileRecord], block_size: int | None, staging: Path
) -> None:
    """Copy the files ``records`` names from ``source`` into ``staging``. Each file's stored
    size is checked first; then each file, in ranges of :data:`RANGE_BYTES` (whole checksum
    blocks), streams in, :data:`TRANSFER_THREADS` ranges at a time, checked against the
    manifest's block checksums as it arrives (so the file needs no second read) and written at
    its place. A file appears under its name only whole and checked. ``block_size`` is the
    manifest's (None, a version-1 manifest: the whole file is one block and one range)."""
    source.fs.invalidate_cache(source.path)  # sizes from the store, not from an older listing
    names = sorted(records)
    with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="accel-download") as pool:
        sizes = list(pool.map(lambda name: source.fs.size(source.file(name)), names))
        ranges: list[_Range] = []
        for name, size in zip(names, sizes, strict=True):
            record = records[name]
            if size != record.size:
                raise CheckpointError(
                    f"checkpoint file {source.url}/{name} is truncated or overwritten: {size} "
                    f"bytes, the manifest says {record.size}."
                )
            local = staging / name
            local.parent.mkdir(parents=True, exist_ok=True)
            with open(_partial(local), "wb") as handle:
                handle.truncate(record.size)
            ranges.extend(_ranges(name, record.size, block_size))
        for _ in pool.map(lambda part: _fetch(source, records, block_size, staging, part), ranges):
            pass
    for name in names:
        os.replace(_partial(staging / name), staging / name)


class _Range(NamedTuple):
    """Bytes ``start`` to ``end`` (exclusive) of file ``name``, starting at block ``block``."""

    name: str
    block: int
    start: int
    end: int


def _ranges(name: str, size: int, block_size: int | None) -> list[_Range]:
    if block_size is None:  # one checksum for the whole file: one request
        return [_Range(name, 0, 0, size)] if size else []
    blocks = max(1, RANGE_BYTES // block_size)
    step = blocks * block_size
    return [
        _Range(name, number * blocks, start, min(start + step, size))
        for number, start in enumerate(range(0, size, step))
    ]


def _fetch(
    source: RemoteFolder,
    records: Mapping[str, FileRecord],
    block_size: int | None,
    staging: Path,
    part: _Range,
) -> None:
    """Stream ``part`` in, checking its blocks and writing it at its place in the partial file."""
    record = records[part.name]
    checksums = BlockChecksums(block_size or max(1, record.size))
    descriptor = os.open(_partial(staging / part.name), os.O_WRONLY)
    offset = part.start
    try:
        with _open_range(source, part) as stream:
            while offset < part.end and (chunk := stream.read(min(CHUNK_BYTES, part.end - offset))):
                checksums.update(chunk)
                view = memoryview(chunk)
                while view:  # a regular file takes it all at once, but a write may be short
                    written = os.pwrite(descriptor, view, offset)
                    view, offset = view[written:], offset + written
    finally:
        os.close(descriptor)
    if offset != part.end:
        raise CheckpointError(
            f"checkpoint file {source.url}/{part.name} is truncated or overwritten: bytes "
            f"{part.start}-{part.end - 1} came back as {offset - part.start} bytes (the "
            f"manifest says {record.size} bytes in all)."
        )
    _check_blocks(source, part, record, checksums.digests(), block_size)


def _open_range(source: RemoteFolder, part: _Range) -> Any:
    """A reader of ``part``'s bytes (``read(n)``, a context manager): one streamed request on
    S3, the filesystem's own file object elsewhere."""
    path = source.file(part.name)
    if is_s3(source.fs):
        return S3RangeReader(source.fs, path, part.start, part.end)
    handle = source.fs.open(path, "rb")
    handle.seek(part.start)
    return handle


def _partial(local: Path) -> Path:
    """Where ``local`` is written until it is whole and checked."""
    return local.with_name(f".{local.name}.part")


def _check_blocks(
    source: RemoteFolder,
    part: _Range,
    record: FileRecord,
    digests: list[str],
    block_size: int | None,
) -> None:
    for offset, found in enumerate(digests):
        index = part.block + offset
        expected = record.blocks[index] if index < len(record.blocks) else None
        if found != expected:
            size = block_size or record.size
            start = part.start + offset * size
            end = min(start + size, record.size)
            raise CheckpointError(
                f"checkpoint file {source.url}/{part.name} is corrupt: its checksum is {found} "
                f"for bytes {start}-{end - 1} (block {index}), the manifest says {expected}."
            )
