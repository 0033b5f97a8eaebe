"""``accel_checkpoint.json``: what a complete checkpoint contains, written last.

It lists every file with its size and xxh3-64 checksum, the world size, the step and iteration, the
library versions, and what each prepared loader and tracker needs to resume. A folder whose
manifest is missing was either written by Accelerate (accepted, without checks) or is not a
checkpoint; a temporary folder never has the final name, so it is never mistaken for one.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.names import MANIFEST

FORMAT = "accel-checkpoint"
VERSION = 1


CHECKSUM = "xxh3_64"
"""The checksum of every file: xxHash's XXH3 (64 bits), several times faster than CRC-32."""


def new_checksum() -> Any:
    """An empty running XXH3-64 checksum (``update(bytes)``, ``hexdigest()``)."""
    import xxhash

    return xxhash.xxh3_64()


@dataclass
class FileRecord:
    """One file of the checkpoint: its size in bytes, its checksum (hex), the rank that wrote it."""

    size: int
    checksum: str
    rank: int = 0


@dataclass
class Manifest:
    """The contents of ``accel_checkpoint.json``."""

    world_size: int
    step: int
    iteration: int
    strategy: str
    files: dict[str, FileRecord] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)
    models: list[dict[str, Any]] = field(default_factory=list)
    dataloaders: list[dict[str, Any]] = field(default_factory=list)
    custom_objects: list[str] = field(default_factory=list)
    trackers: dict[str, Any] = field(default_factory=dict)
    strategy_state: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    def to_json(self) -> str:
        data = {"format": FORMAT, "version": VERSION, "checksum": CHECKSUM, **asdict(self)}
        data["created"] = data["created"] or datetime.now(timezone.utc).isoformat()
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        """The manifest of ``folder``; ``None`` when it has none (an Accelerate checkpoint)."""
        path = folder / MANIFEST
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            if data.pop("format") != FORMAT:
                raise ValueError("not an accel checkpoint manifest")
            data.pop("version")
            if data.pop("checksum", None) != CHECKSUM:
                raise ValueError(f"files are not checksummed with {CHECKSUM}")
            data["files"] = {name: FileRecord(**rec) for name, rec in data["files"].items()}
            return cls(**data)
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"manifest {path} can't be read: {error}") from None

    def write(self, folder: Path) -> None:
        """Write the manifest into ``folder`` atomically (a temporary name, then a rename)."""
        temporary = folder / f".{MANIFEST}.tmp"
        with open(temporary, "w") as handle:
            handle.write(self.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / MANIFEST)

    def verify(
        self, folder: Path, names: list[str] | None = None, checksums: set[str] | None = None
    ) -> None:
        """Check that the listed files (or ``names`` of them) exist with their size and checksum
        (the checksum only of ``checksums``, when given).

        Raises ``CheckpointError`` naming the first file that is missing, truncated or changed.
        """
        for name in names if names is not None else sorted(self.files):
            record = self.files.get(name)
            if record is None:
                continue
            path = folder / name
            if not path.is_file():
                raise CheckpointError(
                    f"checkpoint {folder} is incomplete: {name} (written by rank {record.rank}) "
                    "is missing."
                )
            size = path.stat().st_size
            if size != record.size:
                raise CheckpointError(
                    f"checkpoint file {path} is truncated or overwritten: {size} bytes, the "
                    f"manifest says {record.size}."
                )
            if checksums is not None and name not in checksums:
                continue
            found = file_checksum(path)
            if found != record.checksum:
                raise CheckpointError(
                    f"checkpoint file {path} is corrupt: its checksum is {found}, the manifest "
                    f"says {record.checksum}."
                )


def checksum_share(files: dict[str, FileRecord], index: int, count: int) -> set[str]:
    """The files whose checksum process ``index`` of ``count`` checks: the biggest first, each to
    the process with the fewest bytes so far (the same split on every process)."""
    loads = [0] * count
    share: set[str] = set()
    for name in sorted(files, key=lambda n: (-files[n].size, n)):
        least = loads.index(min(loads))
        loads[least] += files[name].size
        if least == index:
            share.add(name)
    return share


def file_checksum(path: Path) -> str:
    """The checksum of a file (hex), hashed straight from a read-only memory map of it (no copy
    into a buffer: twice as fast as reading it in chunks)."""
    checksum = new_checksum()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size:
            with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mapped:
                checksum.update(mapped)
    return checksum.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions of torch and of the accel packages installed, for the manifest."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "accel-ops", "accel-core", "accel-backends"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found
