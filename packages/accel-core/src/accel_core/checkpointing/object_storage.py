"""Checkpoints at a URL (``s3://``, ``gs://``, ``memory://``...), through fsspec.

A path given to ``save_state`` / ``load_state`` / ``ProjectConfiguration(project_dir=...)`` /
``save_model`` that starts with ``<protocol>://`` is a :class:`RemoteFolder`; ``file://`` is a
local path. The protocol is checked first, before anything is written: fsspec and the protocol's
own package (s3fs, gcsfs...) are optional, and a missing one is an error naming the extra to
install (``pip install 'accel-core[s3]'``).

An object store has no rename, so a checkpoint at a URL is complete exactly when its manifest
(``accel_checkpoint.json``) is there: it is written last, after every process uploaded its
files; listing, ``total_limit`` and ``load_state()`` (the latest) see only folders that have one;
a save over an existing URL first deletes the old folder; rotation deletes a manifest before the
rest. Each process writes the files accel serializes itself straight into the store
(:class:`StreamingUpload`; see :class:`~accel_core.checkpointing.folder_io.CheckpointWriter`); the
files an engine writes into a folder itself go into a folder of its machine's local disk (the
*staging* folder, under ``ACCEL_STAGING_DIR`` or the temporary directory) exactly as for a local
checkpoint, and the :class:`Uploader` sends each one as soon as it is recorded and deletes it once
stored. Loading downloads the checkpoint into the
staging folder (the processes of a machine share the files), checking each file's size and block
checksums as its bytes arrive, and removes it after the load.

Credentials and endpoints come from fsspec's usual places: the protocol's own configuration
(``~/.aws``, ``AWS_ENDPOINT_URL``...), fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` variables, or
``ProjectConfiguration(storage_options=...)``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import queue
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.manifest import BlockChecksums, FileRecord
from accel_core.checkpointing.names import AUTOMATIC_PATTERN, MANIFEST

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
#: The extra of accel-core that installs a protocol's fsspec implementation.
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
#: Files moved at once by one process (an object store serves many requests in parallel).
TRANSFER_THREADS = 4
#: Bytes read from the store per request while downloading (a multiple of the checksum blocks).
CHUNK_BYTES = 8 << 20


def url_protocol(location: str | os.PathLike[str]) -> str | None:
    """The protocol of ``location`` when it is a URL (``"s3"`` for ``s3://b/k``), else None."""
    match = _URL.match(os.fspath(location)) if isinstance(location, str) else None
    return match.group(1).lower() if match else None


@dataclass(frozen=True)
class RemoteFolder:
    """A folder in an fsspec filesystem.

    Attributes:
        url: the folder as the user wrote it (no trailing slash).
        fs: the fsspec filesystem serving it.
        path: the folder in ``fs``'s own notation (the URL without its protocol).
    """

    url: str
    fs: Any = field(compare=False, repr=False)
    path: str

    @property
    def name(self) -> str:
        """The last part of the folder's name."""
        return posixpath.basename(self.path)

    def child(self, name: str) -> RemoteFolder:
        """The folder (or file) ``name`` inside this one."""
        return RemoteFolder(f"{self.url}/{name}", self.fs, f"{self.path}/{name}")

    def file(self, name: str) -> str:
        """The file ``name`` of this folder, in ``fs``'s notation."""
        return f"{self.path}/{name}"

    def has_manifest(self) -> bool:
        """Whether this folder is a complete checkpoint (its manifest is written last). Asks
        the store, not fsspec's cached listings (another process may have written it)."""
        self.fs.invalidate_cache(self.path)
        return bool(self.fs.exists(self.file(MANIFEST)))

    def exists(self) -> bool:
        """Whether anything is stored under this folder."""
        self.fs.invalidate_cache(self.path)
        return bool(self.fs.exists(self.path))

    def __str__(self) -> str:
        return self.url


def remote_folder(
    url: str, storage_options: Mapping[str, Any] | None = None, *, operation: str
) -> RemoteFolder:
    """The :class:`RemoteFolder` of ``url``; a :class:`CheckpointError` naming what to install
    (or the unknown protocol) when fsspec can't serve it. ``operation`` names the call."""
    protocol = url_protocol(url) or ""
    unchanged = "Nothing was written." if operation.startswith("save") else "Nothing was loaded."
    try:
        import fsspec
    except ImportError:
        raise CheckpointError(
            f"{operation}({url!r}): a URL needs fsspec, which is not installed: pip install "
            f"'accel-core[{_EXTRAS.get(protocol, 'storage')}]'. {unchanged}"
        ) from None
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise CheckpointError(
            f"{operation}({url!r}): fsspec knows no protocol {protocol!r} (known: "
            f"{', '.join(sorted(fsspec.available_protocols())[:12])}, ...). {unchanged}"
        ) from None
    except ImportError as error:
        extra = _EXTRAS.get(protocol)
        hint = f"pip install 'accel-core[{extra}]'" if extra else f"install it ({error})"
        raise CheckpointError(
            f"{operation}({url!r}): fsspec's {protocol}:// implementation is not installed: "
            f"{hint}. {unchanged}"
        ) from None
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    return RemoteFolder(url.rstrip("/"), fs, path.rstrip("/"))


def location(
    value: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    operation: str,
) -> Path | RemoteFolder:
    """``value`` as a local path (``file://`` included) or a :class:`RemoteFolder`."""
    protocol = url_protocol(value)
    if protocol is None:
        return Path(value).expanduser()
    text = os.fspath(value)
    if protocol == "file":
        return Path(text[len("file://") :]).expanduser()
    return remote_folder(text, storage_options, operation=operation)


# -- staging ---------------------------------------------------------------------------------


def staging_folder(target: RemoteFolder, node: int) -> Path:
    """The local folder where one machine's processes stage the files of ``target`` (the same
    path for every process of machine ``node``: they share it, as they share a local
    checkpoint's temporary folder)."""
    root = os.environ.get("ACCEL_STAGING_DIR") or os.path.join(tempfile.gettempdir(), "accel")
    digest = hashlib.sha1(target.url.encode()).hexdigest()[:16]
    return Path(root) / f"staging-{digest}-node{node}"


def remove_staging(folder: Path) -> None:
    """Delete a staging folder (nothing else may use it any more)."""
    shutil.rmtree(folder, ignore_errors=True)


# -- transfers -------------------------------------------------------------------------------


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
        self.target.fs.put_file(str(local), self.target.file(name))
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


class StreamingUpload:
    """A binary file whose bytes become the object ``path`` of ``fs``: :meth:`write` hands them
    (in slices of :data:`CHUNK_BYTES`) to a helper thread that sends them on, so serializing
    (``torch.save``) and uploading overlap; at most ``depth`` slices wait in between. Use it as
    a context manager: leaving it normally completes the object, leaving it by an exception
    abandons it (an object store's multipart upload is dropped, nothing appears)."""

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


def download(
    source: RemoteFolder, records: Mapping[str, FileRecord], block_size: int | None, staging: Path
) -> None:
    """Copy the files ``records`` names from ``source`` into ``staging``, each checked against
    its size and block checksums as it arrives (so it needs no second read); a file appears under
    its name only whole and checked. ``block_size`` is the manifest's (None: one per file)."""

    def fetch(name: str) -> None:
        record = records[name]
        local = staging / name
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{local.name}.part")
        checksums = BlockChecksums(block_size or max(1, record.size))
        size = 0
        with source.fs.open(source.file(name), "rb") as remote, open(partial, "wb") as handle:
            while chunk := remote.read(CHUNK_BYTES):
                checksums.update(chunk)
                handle.write(chunk)
                size += len(chunk)
        _check_download(source, name, record, size, checksums.digests(), block_size)
        os.replace(partial, local)

    with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="accel-download") as pool:
        list(pool.map(fetch, sorted(records)))


def _check_download(
    source: RemoteFolder,
    name: str,
    record: FileRecord,
    size: int,
    digests: list[str],
    block_size: int | None,
) -> None:
    if size != record.size:
        raise CheckpointError(
            f"checkpoint file {source.url}/{name} is truncated or overwritten: {size} bytes, the "
            f"manifest says {record.size}."
        )
    for index, (found, expected) in enumerate(zip(digests, record.blocks, strict=True)):
        if found != expected:
            start = index * (block_size or size)
            end = min(start + (block_size or size), size)
            raise CheckpointError(
                f"checkpoint file {source.url}/{name} is corrupt: its checksum is {found} for "
                f"bytes {start}-{end - 1} (block {index}), the manifest says {expected}."
            )


def read_text(folder: RemoteFolder, name: str) -> str | None:
    """The text file ``name`` of ``folder``; None when it is not there."""
    try:
        return folder.fs.cat_file(folder.file(name)).decode()
    except FileNotFoundError:
        return None


def write_text(folder: RemoteFolder, name: str, text: str) -> None:
    """Store ``text`` as the file ``name`` of ``folder`` (one request: whole or not at all)."""
    folder.fs.pipe_file(folder.file(name), text.encode())


# -- automatic checkpoints -------------------------------------------------------------------


def automatic_checkpoints(checkpoints: RemoteFolder) -> list[tuple[int, RemoteFolder]]:
    """The complete ``checkpoint_<n>`` folders under ``checkpoints``, oldest first."""
    fs = checkpoints.fs
    fs.invalidate_cache(checkpoints.path)
    try:
        entries = fs.ls(checkpoints.path, detail=False)
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        name = posixpath.basename(str(entry).rstrip("/"))
        match = AUTOMATIC_PATTERN.match(name)
        if match:
            folder = checkpoints.child(name)
            if folder.has_manifest():
                found.append((int(match.group(1)), folder))
    return sorted(found, key=lambda item: item[0])


def latest_checkpoint(checkpoints: RemoteFolder) -> RemoteFolder:
    """The newest complete automatic checkpoint; ``CheckpointError`` when there is none."""
    found = automatic_checkpoints(checkpoints)
    if not found:
        raise CheckpointError(
            f"load_state() found no complete checkpoint_<n> folder in {checkpoints.url} (a "
            f"folder is complete once its {MANIFEST} is stored); pass input_dir, or save one first."
        )
    return found[-1][1]


def remove(folder: RemoteFolder) -> None:
    """Delete ``folder``: its manifest first, so that it stops counting as a checkpoint even if
    the rest of the deletion is interrupted."""
    fs = folder.fs
    if fs.exists(folder.file(MANIFEST)):
        fs.rm_file(folder.file(MANIFEST))
    fs.invalidate_cache(folder.path)
    if fs.exists(folder.path):
        fs.rm(folder.path, recursive=True)
    fs.invalidate_cache(folder.path)


def prune(checkpoints: RemoteFolder, total_limit: int) -> list[RemoteFolder]:
    """Remove the oldest complete automatic checkpoints beyond ``total_limit``; returns them."""
    found = automatic_checkpoints(checkpoints)
    removed = [folder for _, folder in found[: max(0, len(found) - total_limit)]]
    for folder in removed:
        remove(folder)
    return removed
