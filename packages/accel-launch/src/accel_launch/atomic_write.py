"""Writing a file so that it appears whole or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomically(target: Path, write: Callable[[str], None]) -> None:
    """``write(path)`` into a temporary file beside ``target``, then rename it over ``target``.

    A reader sees the old file or the new one, never a part; a failed write leaves no temporary
    file. The new file gets the permissions a plain ``open()`` would give it.
    """
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(descriptor)
    try:
        write(temporary)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
