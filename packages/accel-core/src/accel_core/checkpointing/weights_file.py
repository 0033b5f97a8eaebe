"""A checkpoint's ``model.safetensors`` read by its header, then straight into the model.

``safetensors.torch.load_file`` builds a new tensor for every weight and ``load_state_dict`` then
copies it into the parameter: two copies and a fresh allocation as big as the model. Here the
header alone gives every key, dtype and shape for the checks (as meta tensors), and, once every
check has passed, the bytes are read from the file directly into the parameters and buffers: one
copy, no allocation. A tensor that can't take the bytes as they are (another dtype, another
device, not contiguous) goes through a temporary CPU tensor and ``copy_``, as ``load_state_dict``
would; a model whose modules customise loading (load hooks, their own ``_load_from_state_dict``)
is loaded through ``load_state_dict`` with tensors read the same way.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from accel_core.checkpointing.errors import CheckpointError

# safetensors' dtype names -> torch dtypes (those this torch has).
_DTYPES: dict[str, torch.dtype] = {
    name: dtype
    for name, dtype in {
        "BOOL": torch.bool,
        "U8": torch.uint8,
        "I8": torch.int8,
        "I16": torch.int16,
        "I32": torch.int32,
        "I64": torch.int64,
        "U16": getattr(torch, "uint16", None),
        "U32": getattr(torch, "uint32", None),
        "U64": getattr(torch, "uint64", None),
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "F32": torch.float32,
        "F64": torch.float64,
        "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
        "F8_E5M2": getattr(torch, "float8_e5m2", None),
    }.items()
    if dtype is not None
}
# torch's own modules whose ``_load_from_state_dict`` only adds version handling for keys that a
# current checkpoint always has (BatchNorm's ``num_batches_tracked``): a direct copy is the same.
_PLAIN_LOADERS = {torch.nn.Module._load_from_state_dict}
_PLAIN_LOADERS.add(torch.nn.modules.batchnorm._NormBase._load_from_state_dict)


@dataclass(frozen=True)
class WeightEntry:
    """One tensor of the file: its dtype, shape and byte range (from the start of the file)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    def meta(self) -> torch.Tensor:
        """A meta tensor with this dtype and shape, for the checks."""
        return torch.empty(self.shape, dtype=self.dtype, device="meta")


def read_header(path: Path) -> dict[str, WeightEntry] | None:
    """Every tensor of the safetensors file ``path``, or ``None`` if it holds a dtype this torch
    lacks (the caller then reads it with safetensors). Raise if the header is damaged."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else size
        if length > size - 8:
            raise _damaged(path, f"its header claims {length} bytes of a {size}-byte file")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _damaged(path, f"its header is not JSON ({error})") from None
    base = 8 + length
    entries: dict[str, WeightEntry] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            return None
        shape = tuple(int(n) for n in info["shape"])
        start, end = (base + int(offset) for offset in info["data_offsets"])
        numel = 1
        for n in shape:
            numel *= n
        if end - start != numel * dtype.itemsize or end > size or start < base:
            raise _damaged(path, f"tensor {key!r} has bytes {start}..{end} for shape {shape}")
        entries[key] = WeightEntry(dtype, shape, start, end)
    return entries


def loads_plainly(model: torch.nn.Module) -> bool:
    """Whether no module of ``model`` customises ``load_state_dict`` (hooks, own loader)."""
    for module in model.modules():
        if module._load_state_dict_pre_hooks or module._load_state_dict_post_hooks:
            return False
        if type(module)._load_from_state_dict not in _PLAIN_LOADERS:
            return False
    return not getattr(model, "_load_state_dict_pre_hooks", None)


def read_into(
    path: Path, entries: dict[str, WeightEntry], targets: dict[str, torch.Tensor]
) -> None:
    """Copy each entry's bytes into ``targets[key]`` (the model's own tensors). A file cut short
    since its header was read is an error before the first tensor changes."""
    with open(path, "rb", buffering=0) as handle, torch.no_grad():
        _check_size(handle, entries, path)
        for key, entry in entries.items():
            target = targets[key]
            if _takes_bytes(target, entry):
                _read_exactly(handle, entry, target, path, key)
            else:
                target.copy_(read_tensor(handle, entry, path, key))


def read_tensors(path: Path, entries: dict[str, WeightEntry]) -> dict[str, torch.Tensor]:
    """Every entry as a new CPU tensor."""
    with open(path, "rb", buffering=0) as handle:
        _check_size(handle, entries, path)
        return {key: read_tensor(handle, entry, path, key) for key, entry in entries.items()}


def read_tensor(handle: BinaryIO, entry: WeightEntry, path: Path, key: str) -> torch.Tensor:
    """One entry as a new CPU tensor."""
    tensor = torch.empty(entry.shape, dtype=entry.dtype)
    _read_exactly(handle, entry, tensor, path, key)
    return tensor


def _check_size(handle: BinaryIO, entries: dict[str, WeightEntry], path: Path) -> None:
    size = os.fstat(handle.fileno()).st_size
    for key, entry in entries.items():
        if entry.end > size:
            raise _damaged(path, f"it ends inside tensor {key!r}")


def _takes_bytes(target: torch.Tensor, entry: WeightEntry) -> bool:
    return (
        target.device.type == "cpu"
        and target.dtype == entry.dtype
        and tuple(target.shape) == entry.shape
        and target.is_contiguous()
    )


def _read_exactly(
    handle: BinaryIO, entry: WeightEntry, tensor: torch.Tensor, path: Path, key: str
) -> None:
    size = entry.end - entry.start
    if size == 0:
        return
    window = (ctypes.c_char * size).from_address(tensor.data_ptr())
    handle.seek(entry.start)
    view, done = memoryview(window).cast("B"), 0
    while done < size:
        count = handle.readinto(view[done:])
        if not count:
            raise _damaged(path, f"it ends inside tensor {key!r}")
        done += count


def _damaged(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint file {path} can't be read: it is truncated or corrupt ({what})."
    )
