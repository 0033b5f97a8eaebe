"""Splitting inputs between processes for distributed inference (``split_between_processes``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def shard_bounds(length: int, num_processes: int, process_index: int) -> tuple[int, int, int]:
    """``(start, end, longest)``: this process's slice of ``length`` items, and the longest share.

    The first ``length % num_processes`` processes get one item more, like Accelerate.
    """
    per_process, extras = divmod(length, num_processes)
    start = process_index * per_process + min(process_index, extras)
    end = start + per_process + (1 if process_index < extras else 0)
    return start, end, per_process + (1 if extras else 0)


def _length(inputs: Any) -> int:
    if isinstance(inputs, Mapping):
        lengths = {}
        for key, value in inputs.items():
            if not hasattr(value, "__len__"):
                raise TypeError(
                    f"split_between_processes can't split the dict value {key!r}, a "
                    f"{type(value).__qualname__}; every value must be a list, tuple, tensor or "
                    "datasets.Dataset"
                )
            lengths[key] = len(value)
        if not lengths:
            return 0
        if len(set(lengths.values())) > 1:
            raise ValueError(
                "split_between_processes needs every value of the dict to have the same length, "
                f"got lengths {lengths}"
            )
        return next(iter(lengths.values()))
    return len(inputs)


def _split_one(inputs: Any, start: int, end: int, longest: int, apply_padding: bool) -> Any:
    if isinstance(inputs, torch.Tensor):
        part = inputs[start:end]
        missing = longest - part.shape[0]
        if apply_padding and missing > 0 and inputs.shape[0] > 0:
            filler = inputs[-1:].expand(missing, *inputs.shape[1:])
            part = torch.cat([part, filler])
        return part
    if isinstance(inputs, (list, tuple)):
        items: Any = inputs[start:end]
        missing = longest - len(items)
        if apply_padding and missing > 0 and len(inputs) > 0:
            items = items + type(items)([inputs[-1]] * missing)
        return items
    if hasattr(inputs, "select") and hasattr(inputs, "__len__"):  # a datasets.Dataset
        indices = list(range(min(start, len(inputs)), min(end, len(inputs))))
        missing = longest - len(indices)
        if apply_padding and missing > 0 and len(inputs) > 0:
            indices += [len(inputs) - 1] * missing
        return inputs.select(indices)
    raise TypeError(
        f"split_between_processes can't split a {type(inputs).__qualname__}; pass a list, tuple, "
        "tensor, datasets.Dataset, or a dict whose values are those"
    )


def split_inputs(inputs: Any, num_processes: int, process_index: int, apply_padding: bool) -> Any:
    """This process's share of ``inputs`` (see ``PartialState.split_between_processes``)."""
    if num_processes == 1:
        return inputs
    start, end, longest = shard_bounds(_length(inputs), num_processes, process_index)
    if isinstance(inputs, Mapping):
        return {
            key: _split_one(value, start, end, longest, apply_padding)
            for key, value in inputs.items()
        }
    return _split_one(inputs, start, end, longest, apply_padding)
