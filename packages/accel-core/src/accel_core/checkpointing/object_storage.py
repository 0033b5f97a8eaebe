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
(see :class:`~accel_core.checkpointing.folder_io.CheckpointWriter`); the files an engine writes
into a folder itself go into a folder of its machine's local disk (the *staging* folder, under
``ACCEL_STAGING_DIR`` or the temporary directory) exactly as for a local checkpoint, and are sent
as soon as they are recorded, then deleted. Loading downloads the checkpoint into the staging
folder (the processes of a machine share the files), checking each file's size and block
checksums as its bytes arrive, and removes it after the load. The transfers themselves are
:mod:`.object_transfers`'.

Credentials and endpoints come from fsspec's usual places: the protocol's own configuration
(``~/.aws``, ``AWS_ENDPOINT_URL``...), fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` variables, or
``ProjectConfiguration(storage_options=...)``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.names import AUTOMATIC_PATTERN, MANIFEST

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
#: The extra of accel-core that installs a protocol's fsspec implementation.
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}


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
