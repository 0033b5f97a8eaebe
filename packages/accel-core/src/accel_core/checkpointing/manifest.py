"""``accel_checkpoint.json``: what a complete checkpoint contains, written last.

It lists every file with its size and the xxh3-64 checksum of each of its blocks (fixed-size byte
ranges, so that the processes of a node can split the checking evenly), the world size, the step
and iteration, the library versions, and what each prepared loader and tracker needs to resume. A
folder whose manifest is missing was either written by Accelerate (accepted, without checks) or is
not a checkpoint; a temporary folder never has the final name, so it is never mistaken for one.

Version 1 manifests (one checksum per whole file) are still read: each file is then one block.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path
from typing import Any

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.names import MANIFEST

FORMAT = "accel-checkpoint"
VERSION = 2
READABLE_VERSIONS = (1, 2)


CHECKSUM = "xxh3_64"
"""The checksum of every block: xxHash's XXH3 (64 bits), several times faster than CRC-32."""

BLOCK_SIZE = 8 << 20
"""Bytes per checksummed block (the last block of a file is shorter). Hashing runs at the same
speed for blocks of 4 to 32 MiB; 8 MiB keeps the processes' shares within 8 MiB of each other
while a 100 GB checkpoint lists ~12,000 checksums."""


def new_checksum() -> Any:
    """An empty running XXH3-64 checksum (``update(bytes)``, ``hexdigest()``)."""
    import xxhash

    return xxhash.xxh3_64()


@dataclass
class FileRecord:
    """One file of the checkpoint: its size in bytes, the checksum (hex) of each of its blocks
    (in order; none for an empty file), the rank that wrote it."""

    size: int
    blocks: list[str]
    rank: int = 0


@dataclass(frozen=True)
class Block:
    """Bytes ``start`` to ``end`` (exclusive) of the checkpoint file ``name``, block ``index`` of
    it, and their checksum in the manifest."""

    name: str
    index: int
    start: int
    end: int
    checksum: str

    @property
    def size(self) -> int:
        """The number of bytes of the block."""
        return self.end - self.start


def block_spans(size: int, block_size: int | None) -> list[tuple[int, int]]:
    """The ``(start, end)`` byte ranges of the blocks of a file of ``size`` bytes; ``block_size``
    ``None`` (a version-1 manifest) makes the whole file one block."""
    if block_size is None:
        return [(0, size)] if size else []
    return [(start, min(start + block_size, size)) for start in range(0, size, block_size)]


class BlockChecksums:
    """The block checksums of bytes that arrive in pieces of any size (``update``), each piece
    split at the block boundaries it crosses."""

    def __init__(self, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self._finished: list[str] = []
        self._current = new_checksum()
        self._filled = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` (any contiguous buffer) to the blocks."""
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), self.block_size - self._filled)
            self._current.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.block_size:
                self._finished.append(self._current.hexdigest())
                self._current.reset()
                self._filled = 0

    def digests(self) -> list[str]:
        """The checksums of the blocks so far (hex), the last one short if the bytes stop there."""
        return self._finished + ([self._current.hexdigest()] if self._filled else [])


@dataclass
class Manifest:
    """The contents of ``accel_checkpoint.json``.

    ``block_size`` is the size of the checksummed blocks of every file; ``None`` for a manifest
    of version 1, which has one checksum per whole file.
    """

    world_size: int
    step: int
    iteration: int
    strategy: str
    files: dict[str, FileRecord] = field(default_factory=dict)
    block_size: int | None = BLOCK_SIZE
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
        return cls.read_text(path.read_text(), str(path))

    @classmethod
    def read_text(cls, text: str, where: str) -> Manifest:
        """The manifest whose JSON is ``text``; ``where`` names it in errors."""
        try:
            data = json.loads(text)
            if data.pop("format") != FORMAT:
                raise ValueError("not an accel checkpoint manifest")
            version = data.pop("version")
            if version not in READABLE_VERSIONS:
                raise ValueError(f"version {version} is not one this accel-core reads (1 or 2)")
            if data.pop("checksum", None) != CHECKSUM:
                raise ValueError(f"files are not checksummed with {CHECKSUM}")
            if version == 1:
                data["files"] = {name: _version_1_record(**r) for name, r in data["files"].items()}
                data["block_size"] = None
            else:
                data["files"] = {name: FileRecord(**r) for name, r in data["files"].items()}
            manifest = cls(**data)
            manifest._check_blocks_listed()
            return manifest
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"manifest {where} can't be read: {error}") from None

    def write(self, folder: Path) -> None:
        """Write the manifest into ``folder`` atomically (a temporary name, then a rename)."""
        temporary = folder / f".{MANIFEST}.tmp"
        with open(temporary, "w") as handle:
            handle.write(self.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / MANIFEST)

    def blocks(self, names: Iterable[str] | None = None) -> list[Block]:
        """Every block of the listed files (or of ``names`` of them), in name and byte order."""
        found = []
        for name in sorted(self.files) if names is None else names:
            record = self.files[name]
            spans = zip(block_spans(record.size, self.block_size), record.blocks, strict=True)
            for index, ((start, end), checksum) in enumerate(spans):
                found.append(Block(name, index, start, end, checksum))
        return found

    def verify(
        self,
        folder: Path,
        names: list[str] | None = None,
        blocks: Iterable[Block] | None = None,
        threads: int = 1,
    ) -> None:
        """Check that the listed files (or ``names`` of them) exist with their size, and that
        each of their blocks has its checksum (only ``blocks`` of them, when given: a process's
        share, see :func:`checksum_share`).

        ``threads`` > 1 hashes that many runs of consecutive blocks at once (the hashing releases
        the GIL): for cores the node's processes leave idle.

        Raises ``CheckpointError`` naming the first file that is missing or truncated, else the
        first changed block's file and byte range.
        """
        listed = [n for n in (sorted(self.files) if names is None else names) if n in self.files]
        for name in listed:
            self._check_size(folder, name)
        wanted = set(listed)
        checked = self.blocks(listed) if blocks is None else [b for b in blocks if b.name in wanted]
        checked.sort(key=lambda b: (b.name, b.start))
        runs = _consecutive_runs(checked, threads)
        if len(runs) == 1:
            _check_run(folder, runs[0])
            return
        with ThreadPoolExecutor(len(runs), thread_name_prefix="accel-verify") as pool:
            futures = [pool.submit(_check_run, folder, run) for run in runs]
        # The runs are in block order and each stops at its first changed block: the first run
        # that failed names the first changed block of all.
        for future in futures:
            future.result()

    def _check_size(self, folder: Path, name: str) -> None:
        record = self.files[name]
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

    def _check_blocks_listed(self) -> None:
        if self.block_size is not None and (
            not isinstance(self.block_size, int) or self.block_size <= 0
        ):
            raise ValueError(f"block_size {self.block_size!r} is not a positive number of bytes")
        for name, record in self.files.items():
            expected = len(block_spans(record.size, self.block_size))
            if len(record.blocks) != expected:
                raise ValueError(
                    f"{name} has {len(record.blocks)} block checksum(s), its {record.size} bytes "
                    f"make {expected} block(s)"
                )


def _consecutive_runs(blocks: list[Block], count: int) -> list[list[Block]]:
    """``blocks`` (in order) cut into at most ``count`` runs of consecutive blocks with about
    the same number of bytes each; one run when there is nothing to share."""
    count = max(1, min(count, len(blocks)))
    if count == 1:
        return [blocks]
    total = sum(block.size for block in blocks)
    runs: list[list[Block]] = [[]]
    done = 0
    for block in blocks:
        if runs[-1] and done >= total * len(runs) / count:
            runs.append([])
        runs[-1].append(block)
        done += block.size
    return runs


def _check_run(folder: Path, blocks: list[Block]) -> None:
    for name, file_blocks in groupby(blocks, key=lambda b: b.name):
        _check_block_checksums(folder / name, list(file_blocks))


def _version_1_record(size: int, checksum: str, rank: int = 0) -> FileRecord:
    """A version-1 file entry (one whole-file checksum) as a record of one block."""
    return FileRecord(size, [checksum] if size else [], rank)


def _check_block_checksums(path: Path, blocks: list[Block]) -> None:
    """Hash ``blocks`` of one file from a read-only memory map of it (only their pages are read)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < blocks[-1].end:
            raise CheckpointError(
                f"checkpoint file {path} is truncated or overwritten: {size} bytes, its block "
                f"{blocks[-1].index} ends at byte {blocks[-1].end}."
            )
        with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            for block in blocks:
                found = range_checksum(mapped, block.start, block.end)
                if found != block.checksum:
                    raise CheckpointError(
                        f"checkpoint file {path} is corrupt: its checksum is {found} for bytes "
                        f"{block.start}-{block.end - 1} (block {block.index}), the manifest says "
                        f"{block.checksum}."
                    )


def range_checksum(mapped: mmap.mmap, start: int, end: int) -> str:
    """The checksum (hex) of bytes ``start`` to ``end`` (exclusive) of a memory-mapped file,
    hashed in place (no copy into a buffer: twice as fast as reading it)."""
    checksum = new_checksum()
    with memoryview(mapped) as view, view[start:end] as part:
        checksum.update(part)
    return checksum.hexdigest()


def checksum_share(manifest: Manifest, index: int, count: int) -> list[Block]:
    """The blocks whose checksum process ``index`` of ``count`` checks: the biggest first, each to
    the process with the fewest bytes so far (the same split on every process). As no block is
    bigger than the block size, the processes' shares differ by at most one block."""
    loads = [0] * count
    share: list[Block] = []
    for block in sorted(manifest.blocks(), key=lambda b: (-b.size, b.name, b.start)):
        least = loads.index(min(loads))
        loads[least] += block.size
        if least == index:
            share.append(block)
    return share


def file_block_checksums(path: Path, block_size: int = BLOCK_SIZE) -> list[str]:
    """The checksum (hex) of each block of a file, hashed straight from a read-only memory map
    of it; the same as :class:`BlockChecksums` of its bytes."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if not size:
            return []
        with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            return [range_checksum(mapped, s, e) for s, e in block_spans(size, block_size)]


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
