"""Reading safetensors files: a validated header, and tensors read eagerly into fresh memory.

The header is read and checked before anything is loaded, so a truncated or corrupt file is a
clear error naming the file. ``SafetensorsFile.map`` returns one tensor memory-mapped from the
file: no copy is made, and the memory is released as soon as the tensor is.
"""

from __future__ import annotations

import ctypes
import json
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
        self._parse()

    def _fail(self, why: str) -> CheckpointError:
        return CheckpointError(
            f"{self.path} is not a readable safetensors file: {why}. The file is truncated or "
            f"corrupt; save or download it again."
        )

    def _parse(self) -> None:
        try:
            size = os.path.getsize(self.path)
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
        """Tensor ``name`` memory-mapped from the file: nothing is read until it is used, and
        the mapping (and the memory it occupies) goes away with the tensor."""
        from safetensors import safe_open

        if name not in self.entries:
            raise KeyError(f"{name!r} is not in {self.path}")
        try:
            with safe_open(self.path, framework="pt", device="cpu") as handle:
                return handle.get_tensor(name)
        except Exception as error:  # the file changed or vanished since it was checked
            raise CheckpointError(f"cannot read {name!r} from {self.path}: {error}") from None


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
