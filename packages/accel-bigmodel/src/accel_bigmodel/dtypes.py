"""Byte sizes of dtypes and of human-written memory amounts ("10GiB", "500MB")."""

from __future__ import annotations

import enum

import torch

from accel_ops.sizes import parse_size


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


def convert_file_size_to_int(size: int | str) -> int:
    """Convert ``size`` to bytes: ints pass through, strings such as "10GiB", "500MB", "1.5GB".

    Decimal units (KB, MB, GB, TB) are powers of 1000, binary units (KiB, MiB, GiB, TiB) powers of
    1024. A lowercase "b" suffix after a decimal unit ("5Gb") means bits, like Accelerate. The
    rules are :func:`accel_ops.sizes.parse_size`'s.
    """
    return parse_size(size, bits=True)


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
