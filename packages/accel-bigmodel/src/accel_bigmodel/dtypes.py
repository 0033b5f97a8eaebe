"""Byte sizes of dtypes and of human-written memory amounts ("10GiB", "500MB")."""

from __future__ import annotations

import enum
import re

import torch


class CustomDtype(enum.Enum):
    """Dtypes that torch has no native type for, used to size quantized weights."""

    FP8 = "fp8"
    INT4 = "int4"
    INT2 = "int2"


_CUSTOM_SIZES = {CustomDtype.FP8: 1.0, CustomDtype.INT4: 0.5, CustomDtype.INT2: 0.25}


def dtype_byte_size(dtype: torch.dtype | CustomDtype) -> float:
    """Bytes taken by one element of ``dtype`` (``torch.bool`` counts as 1/8, like Accelerate)."""
    if isinstance(dtype, CustomDtype):
        return _CUSTOM_SIZES[dtype]
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype_byte_size expects a torch.dtype or CustomDtype, got {dtype!r}")
    if dtype == torch.bool:
        return 1 / 8
    return float(dtype.itemsize)


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?I?B?)\s*$", re.IGNORECASE)


def convert_file_size_to_int(size: int | str) -> int:
    """Convert ``size`` to bytes: ints pass through, strings such as "10GiB", "500MB", "1.5GB".

    Decimal units (KB, MB, GB, TB) are powers of 1000, binary units (KiB, MiB, GiB, TiB) powers of
    1024. A lowercase "b" suffix after a decimal unit ("5Gb") means bits, like Accelerate.
    """
    if isinstance(size, bool):
        raise ValueError(f"memory size must be an int or a string such as '10GiB', got {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"memory size must not be negative, got {size}")
        return size
    if isinstance(size, float) and size >= 0:
        return int(size)
    if not isinstance(size, str):
        raise ValueError(f"memory size must be an int or a string such as '10GiB', got {size!r}")
    match = _SIZE_PATTERN.match(size)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"cannot read the memory size {size!r}: expected a number of bytes or a number "
            f"followed by one of KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB "
            f"(powers of 1024), for example '10GiB' or '500MB'"
        )
    value = float(match.group(1)) * _UNITS[unit]
    if match.group(2).endswith("b") and not match.group(2).upper().endswith("IB"):
        value /= 8  # "Gb" = gigabits
    return int(value)


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``torch.float16``, ``"float16"`` or ``"torch.float16"`` -> ``torch.float16``."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        value = getattr(torch, dtype.removeprefix("torch."), None)
        if isinstance(value, torch.dtype):
            return value
    raise ValueError(f"unknown dtype {dtype!r}: expected a torch.dtype or a name such as 'float16'")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the spelling used in offload indexes)."""
    return str(dtype).removeprefix("torch.")
