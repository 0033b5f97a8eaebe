"""Batch helpers: finding the batch size, slicing, concatenating, dropping the padded tail."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from accel_ops.tree import honor_type, rebuild_mapping, recursively_apply


def find_batch_size(data: Any) -> int:
    """The size of dim 0 of the first tensor found in ``data`` (depth first).

    Raises ``ValueError`` for an empty container and ``TypeError`` when the first leaf is not a
    tensor.
    """
    if isinstance(data, (tuple, list, Mapping)) and len(data) == 0:
        raise ValueError(f"Cannot find the batch size of an empty {type(data).__qualname__}")
    if isinstance(data, (tuple, list)):
        return find_batch_size(data[0])
    if isinstance(data, Mapping):
        return find_batch_size(next(iter(data.values())))
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"Can only find the batch size of tensors, got a {type(data).__qualname__}")
    return int(data.shape[0])


def ignorant_find_batch_size(data: Any) -> int | None:
    """:func:`find_batch_size`, or ``None`` where it would raise."""
    try:
        return find_batch_size(data)
    except (ValueError, TypeError, IndexError):
        return None


def slice_tensors(
    data: Any, tensor_slice: Any, process_index: int | None = None, num_processes: int | None = None
) -> Any:
    """Index every tensor of ``data`` with ``tensor_slice`` (e.g. ``slice(0, 8)``).

    ``process_index`` and ``num_processes`` are accepted for Accelerate compatibility and unused.
    """
    return recursively_apply(lambda tensor: tensor[tensor_slice], data)


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """Concatenate a list of same-structured nests of tensors into one nest, along ``dim``.

    A list of one item that is not a tensor or a nest is returned as that item, as Accelerate
    documents ("a single batch of data is returned as-is").
    """
    if not isinstance(data, (list, tuple)) or len(data) == 0:
        raise ValueError("concatenate needs a non-empty list of tensors or of nested structures")
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(
            first, (concatenate([item[i] for item in data], dim=dim) for i in range(len(first)))
        )
    if isinstance(first, Mapping):
        return rebuild_mapping(
            first, {key: concatenate([item[key] for item in data], dim=dim) for key in first}
        )
    if not isinstance(first, torch.Tensor):
        if len(data) == 1:
            return first
        raise TypeError(f"Can only concatenate tensors, got a {type(first).__qualname__}")
    return torch.cat(list(data), dim=dim)


def drop_duplicated_tail(data: Any, num_samples: int | None) -> Any:
    """Keep the first ``num_samples`` rows of each gathered tensor; drop the duplicated rest.

    Contract (used by ``gather_for_metrics``): the last batch of an evaluation loop is padded by
    repeating samples so every process gets a full batch; after gathering it holds duplicates at
    its end. ``num_samples`` is how many real samples that gathered batch holds (Accelerate's
    ``GradientState.remainder``). Every tensor of ``data`` (nested structures allowed) is cut to
    its first ``num_samples`` rows along dim 0; when ``data`` is a list of gathered objects
    (``gather_object``'s result) the list itself is cut. ``None``, ``0`` and negative values mean
    "nothing was duplicated" and return ``data`` unchanged. Tensors shorter than ``num_samples``
    and 0-dim tensors are returned whole.
    """
    if num_samples is None or num_samples <= 0:
        return data
    if isinstance(data, list) and not any(isinstance(item, torch.Tensor) for item in data):
        return data[:num_samples]

    def cut(tensor: torch.Tensor) -> torch.Tensor:
        return tensor if tensor.ndim == 0 else tensor[:num_samples]

    return recursively_apply(cut, data)
