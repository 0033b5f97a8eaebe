"""Reading safetensors files: a validated header, and tensors served from one memory map.

The header is read and checked before anything is loaded, so a truncated or corrupt file is a
clear error naming the file. ``SafetensorsFile.map`` returns one tensor as a view of the file's
memory map, which is made once per file and kept: no copy, no read until the tensor is used, and
no per-tensor ``open``/``mmap``/header parse (an offloaded model asks for every weight on every
forward). ``SafetensorsFile.release`` gives a tensor's pages back (``MADV_DONTNEED``): they stay
in the page cache, and the process's memory stays at what is in use.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
    "F8_E5M2": getattr(torch, "float8_e5m2", None),
    "U16": getattr(torch, "uint16", None),
    "U32": getattr(torch, "uint32", None),
    "U64": getattr(torch, "uint64", None),
}


class CheckpointError(ValueError):
    """A checkpoint file or index that cannot be loaded; the message names the file and the fix."""


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives in a safetensors file."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


class SafetensorsFile:
    """The header of one safetensors file, checked against the file size, and eager reads."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(Path(path).resolve())
        self.entries: dict[str, TensorEntry] = {}
        self.metadata: dict[str, str] = {}
        self.size = 0
        self._mapping: mmap.mmap | None = None
        self._base: int | None = None  # the map's address, for mincore
        self._mapping_lock = threading.Lock()
        self._parse()

    def _fail(self, why: str) -> CheckpointError:
        return CheckpointError(
            f"{self.path} is not a readable safetensors file: {why}. The file is truncated or "
            f"corrupt; save or download it again."
        )

    def _parse(self) -> None:
        try:
            size = self.size = os.path.getsize(self.path)
            with open(self.path, "rb") as handle:
                head = handle.read(8)
                if len(head) < 8:
                    raise self._fail(f"it has {size} bytes, fewer than the 8-byte header length")
                (header_len,) = struct.unpack("<Q", head)
                if header_len > size - 8:
                    raise self._fail(
                        f"its header claims {header_len} bytes but the file has only {size}"
                    )
                raw = handle.read(header_len)
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint file {self.path}: {error}") from None
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise self._fail(f"its header is not valid JSON ({error})") from None
        if not isinstance(header, dict):
            raise self._fail("its header is not a JSON object")
        base = 8 + header_len
        for name, info in header.items():
            if name == "__metadata__":
                self.metadata = dict(info or {})
                continue
            try:
                dtype = _DTYPES[info["dtype"]]
                start, end = (int(v) for v in info["data_offsets"])
                shape = tuple(int(v) for v in info["shape"])
            except (KeyError, TypeError, ValueError):
                raise self._fail(f"the header entry for {name!r} is malformed") from None
            if dtype is None:
                raise self._fail(f"{name!r} has dtype {info['dtype']}, unknown to this torch")
            numel = 1
            for dim in shape:
                numel *= dim
            if end - start != numel * dtype.itemsize or start < 0:
                raise self._fail(f"the byte range of {name!r} does not match its shape and dtype")
            if base + end > size:
                raise self._fail(
                    f"{name!r} ends at byte {base + end} but the file has only {size} bytes"
                )
            self.entries[name] = TensorEntry(dtype, shape, base + start, base + end)

    def keys(self) -> list[str]:
        """The tensor names in file order."""
        return list(self.entries)

    def map(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as a view of the file's memory map: nothing is read until it is used.

        The map is private (copy on write): writing to the tensor never changes the file.
        """
        entry = self.entries.get(name)
        if entry is None:
            raise KeyError(f"{name!r} is not in {self.path}")
        numel = (entry.end - entry.start) // entry.dtype.itemsize
        if numel == 0:
            return torch.empty(entry.shape, dtype=entry.dtype)
        flat = torch.frombuffer(self._mapped(), dtype=entry.dtype, count=numel, offset=entry.start)
        return flat.view(entry.shape)

    def release(self, name: str) -> None:
        """Give back the pages of tensor ``name`` that no other tensor shares (the whole pages
        inside its byte range): the next use reads them again from the page cache."""
        entry = self.entries.get(name)
        mapping = self._mapping
        if entry is None or mapping is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = -(-entry.start // page) * page
        end = entry.end // page * page
        if end > start:
            mapping.madvise(mmap.MADV_DONTNEED, start, end - start)

    def advise(self, name: str) -> None:
        """Ask the kernel to start reading tensor ``name`` from disk now (``MADV_WILLNEED``),
        without waiting and without mapping anything: a later use finds it in the page cache.

        Skipped when the tensor's first page is already in the page cache (one ``mincore`` call):
        asking for pages that are all there costs more than it saves.
        """
        entry = self.entries.get(name)
        if entry is None or entry.end == entry.start or not hasattr(mmap, "MADV_WILLNEED"):
            return
        mapping = self._mapped()
        start = entry.start // mmap.PAGESIZE * mmap.PAGESIZE
        if self._base is None:
            self._base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        if not _page_in_memory(self._base + start):
            mapping.madvise(mmap.MADV_WILLNEED, start, entry.end - start)

    def _mapped(self) -> mmap.mmap:
        mapping = self._mapping
        if mapping is not None:
            return mapping
        with self._mapping_lock:
            if self._mapping is None:
                try:
                    with open(self.path, "rb") as handle:
                        size = os.fstat(handle.fileno()).st_size
                        if size != self.size:
                            raise CheckpointError(
                                f"{self.path} changed since its header was read ({self.size} "
                                f"bytes, now {size}); load the checkpoint again"
                            )
                        self._mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
                except OSError as error:
                    raise CheckpointError(f"cannot map {self.path}: {error}") from None
            return self._mapping


_LIBC = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None
_MINCORE = getattr(_LIBC, "mincore", None)


def _page_in_memory(address: int) -> bool:
    """Whether the mapped page at ``address`` (page-aligned) is in memory (the page cache, for a
    file map); False when the system can't tell (no ``mincore``)."""
    if _MINCORE is None:
        return False
    vector = ctypes.c_ubyte(0)
    if _MINCORE(ctypes.c_void_p(address), ctypes.c_size_t(1), ctypes.byref(vector)) != 0:
        return False
    return bool(vector.value & 1)


def _byte_view(tensor: torch.Tensor) -> memoryview:
    """A byte view of a contiguous CPU tensor's memory (any dtype), without numpy.

    The caller keeps ``tensor`` alive while the view is used.
    """
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        raise ValueError("_byte_view needs a contiguous CPU tensor")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nbytes).from_address(tensor.data_ptr())).cast("B")


_CACHE: dict[str, tuple[float, SafetensorsFile]] = {}
_CACHE_LOCK = threading.Lock()


def open_safetensors(path: str | os.PathLike) -> SafetensorsFile:
    """A cached ``SafetensorsFile`` for ``path`` (re-read when the file changes)."""
    key = str(Path(path).resolve())
    stamp = os.stat(key).st_mtime_ns
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    parsed = SafetensorsFile(key)
    with _CACHE_LOCK:
        _CACHE[key] = (stamp, parsed)
    return parsed
