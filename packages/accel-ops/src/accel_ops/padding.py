"""Padding tensors so that they can be gathered: across processes, or to a multiple of them."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from accel_ops import _comm
from accel_ops.collectives import _ALL_GATHER
from accel_ops.tree import apply_to_tensors

_SIZES_WITH_FINGERPRINT = 6


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
    they are; nested tensors too, with a :class:`CannotPadNestedTensorWarning`. The sizes travel
    with a fingerprint of every other dimension and dtype, in one collective for up to six tensors
    (two for more): ranks whose tensors differ elsewhere than along ``dim`` get an error on every
    rank, in any mode. On one process the input is returned unchanged.
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
    dims = [_normal_dim(leaf, dim) for leaf in leaves]
    longest = _longest_sizes(comm, tensor, leaves, dims, dim)
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


def _longest_sizes(
    comm: _comm.Comm, tensor: Any, leaves: list[torch.Tensor], dims: list[int | None], dim: int
) -> list[int]:
    """The largest size along ``dim`` of each leaf over all ranks (-1: the leaf has no ``dim``).

    The sizes travel with a fingerprint (:func:`accel_ops._comm.fingerprint`: the collective, every
    other dimension and the dtypes), in one all-gather of fixed length: the first
    :data:`_SIZES_WITH_FINGERPRINT` sizes, and the rest in a second one only when there are more.
    Ranks that pass different structures therefore raise the same clear error, in any mode.
    """
    if comm.debug:
        _comm.verify("pad_across_processes", comm, tensor, loose_dim=dim)
    sizes = [-1 if d is None else leaf.shape[d] for leaf, d in zip(leaves, dims, strict=True)]
    head = sizes[:_SIZES_WITH_FINGERPRINT]
    head += [-1] * (_SIZES_WITH_FINGERPRINT - len(head))
    own = _comm.fingerprint("pad_across_processes", _comm.describe(tensor, loose_dim=dim))
    exchanged = _all_gather_ints(comm, [*own, *head], leaves[0].device, tensor)
    if any(row[:2] != own for row in exchanged):
        _comm.verify("pad_across_processes", comm, tensor, loose_dim=dim)
    columns = [row[2:] for row in exchanged]
    if len(sizes) > _SIZES_WITH_FINGERPRINT:
        rest = _all_gather_ints(comm, sizes[_SIZES_WITH_FINGERPRINT:], leaves[0].device, tensor)
        columns = [row + extra for row, extra in zip(columns, rest, strict=True)]
    return [max(column) for column in zip(*columns, strict=True)][: len(sizes)]


def _all_gather_ints(
    comm: _comm.Comm, values: list[int], device: torch.device, inputs: Any
) -> list[list[int]]:
    mine = torch.tensor(values, dtype=torch.int64, device=device)
    everyone = mine.new_empty(comm.world_size * mine.numel())
    where = {"group": comm.group, "inputs": inputs}
    _comm.call("pad_across_processes", comm, _ALL_GATHER, everyone, mine, **where)
    return everyone.view(comm.world_size, -1).tolist()


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
