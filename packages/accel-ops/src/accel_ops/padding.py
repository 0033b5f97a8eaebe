"""Padding tensors so that they can be gathered: across processes, or to a multiple of them."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from accel_ops import _comm
from accel_ops.collectives import _ALL_GATHER
from accel_ops.tree import apply_to_tensors


class CannotPadNestedTensorWarning(UserWarning):
    """A nested (jagged) tensor was passed to pad_across_processes and left as it is."""


def _padded(
    tensor: torch.Tensor, dim: int, length: int, pad_index: Any, pad_first: bool
) -> torch.Tensor:
    current = tensor.shape[dim]
    if length == current:
        return tensor
    if isinstance(pad_index, torch.Tensor):  # e.g. a row of the input, as Accelerate allows
        pad_index = pad_index.item()
    shape = list(tensor.shape)
    shape[dim] = length
    out = tensor.new_full(shape, pad_index)
    start = length - current if pad_first else 0
    out.narrow(dim, start, current).copy_(tensor)
    return out


def _normal_dim(tensor: torch.Tensor, dim: int) -> int | None:
    """``dim`` as a non-negative index into ``tensor``, or None when the tensor has no such dim."""
    if tensor.is_nested or not -tensor.ndim <= dim < tensor.ndim:
        return None
    return dim + tensor.ndim if dim < 0 else dim


def pad_across_processes(
    tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False, group: Any = None
) -> Any:
    """Pad each tensor of ``tensor`` along ``dim`` to the largest size any process has there.

    Padding is filled with ``pad_index``, after the data (before it with ``pad_first``). The
    result can then be passed to :func:`gather`. Tensors without dimension ``dim`` are returned as
    they are; nested tensors too, with a :class:`CannotPadNestedTensorWarning`. All sizes travel in
    one collective, however many tensors ``tensor`` holds. On one process the input is returned
    unchanged.
    """
    if isinstance(tensor, torch.Tensor):
        leaves = [tensor]
    else:
        leaves = []

        def collect(leaf: torch.Tensor) -> torch.Tensor:
            leaves.append(leaf)
            return leaf

        apply_to_tensors("pad_across_processes", collect, tensor)
    for leaf in leaves:
        if leaf.is_nested:
            warnings.warn(
                "pad_across_processes can't pad a nested tensor without knowing its layout; it "
                "is returned unpadded.",
                CannotPadNestedTensorWarning,
                stacklevel=2,
            )
    comm = _comm.resolve(group)
    if comm is None or not leaves:
        return tensor
    if comm.debug:
        _comm.verify("pad_across_processes", comm, tensor, loose_dim=dim)
    dims = [_normal_dim(leaf, dim) for leaf in leaves]
    sizes = torch.tensor(
        [-1 if d is None else leaf.shape[d] for leaf, d in zip(leaves, dims, strict=True)],
        dtype=torch.int64,
        device=leaves[0].device,
    )
    everyone = sizes.new_empty(comm.world_size * sizes.numel())
    _comm.call("pad_across_processes", comm, _ALL_GATHER, everyone, sizes, group=comm.group)
    longest = everyone.view(comm.world_size, -1).amax(dim=0).tolist()
    if isinstance(tensor, torch.Tensor):
        if dims[0] is None:
            return tensor
        return _padded(tensor, dims[0], int(longest[0]), pad_index, pad_first)
    position = iter(zip(dims, longest, strict=True))

    def pad(leaf: torch.Tensor) -> torch.Tensor:
        leaf_dim, length = next(position)
        if leaf_dim is None:
            return leaf
        return _padded(leaf, leaf_dim, int(length), pad_index, pad_first)

    return apply_to_tensors("pad_across_processes", pad, tensor)


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Pad each tensor of ``tensor`` along ``dim`` with zeros so that it splits evenly.

    The new length is ``batch_size`` rounded up to a multiple of ``num_processes`` (at least
    ``num_processes``), e.g. 3 rows on 4 processes become 4 and 5 rows become 8. Local: nothing is
    communicated. Drop the padded rows from the results afterwards.
    """
    if num_processes < 1:
        raise ValueError(f"pad_input_tensors(num_processes={num_processes}) must be >= 1")
    target = max(num_processes, -(-batch_size // num_processes) * num_processes)

    def pad(leaf: torch.Tensor) -> torch.Tensor:
        leaf_dim = _normal_dim(leaf, dim)
        if leaf_dim is None or leaf.shape[leaf_dim] >= target:
            return leaf
        return _padded(leaf, leaf_dim, target, 0, False)

    return apply_to_tensors("pad_input_tensors", pad, tensor)
