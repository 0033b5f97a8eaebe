"""Folders given as URLs (``s3://bucket/run``) to ``accel merge-weights``, through fsspec.

``file://`` and plain paths are local. fsspec comes with torch; a protocol's own package (s3fs,
gcsfs) is optional, and a missing one is an error naming it before anything is read or written.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_launch.errors import AccelLaunchError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
#: fsspec's implementation package of the common protocols, for the error message.
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}


@dataclass(frozen=True)
class UrlFolder:
    """A folder in an fsspec filesystem: ``url`` as given, ``fs`` serving it, ``path`` in the
    filesystem's own notation."""

    url: str
    fs: Any
    path: str

    def file(self, name: str) -> str:
        """The file ``name`` of this folder, in ``fs``'s notation."""
        return f"{self.path}/{name}"


def folder(value: str | os.PathLike[str]) -> Path | UrlFolder:
    """``value`` as a local path (``file://`` included) or a :class:`UrlFolder`."""
    text = os.fspath(value)
    match = _URL.match(text)
    if match is None:
        return Path(text)
    protocol = match.group(1).lower()
    if protocol == "file":
        return Path(text[len("file://") :])
    try:
        import fsspec

        fsspec.get_filesystem_class(protocol)
    except ImportError:
        package = _PACKAGES.get(protocol, f"fsspec's {protocol} implementation")
        raise AccelLaunchError(
            f"{text!r}: reading or writing {protocol}:// needs {package}: pip install {package}"
        ) from None
    except ValueError:
        raise AccelLaunchError(f"{text!r}: fsspec knows no protocol {protocol!r}") from None
    fs, path = fsspec.core.url_to_fs(text)
    return UrlFolder(text.rstrip("/"), fs, path.rstrip("/"))
