"""Moving nested structures of tensors between devices, and emptying a device's cache."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from accel_ops.tree import honor_type, rebuild_mapping


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: str | Iterable[str] | None = None,
) -> Any:
    """Move every tensor of ``tensor`` (nested structures allowed) to ``device``.

    Objects with a ``.to`` method (e.g. a tokenizer's ``BatchEncoding``) are moved with it. Mapping
    entries whose key is in ``skip_keys`` are left where they are. Other leaves are returned
    unchanged.
    """
    if isinstance(tensor, torch.Tensor):
        return tensor.to(device, non_blocking=non_blocking)
    if isinstance(tensor, (tuple, list)):
        return honor_type(
            tensor, (send_to_device(t, device, non_blocking, skip_keys) for t in tensor)
        )
    if isinstance(tensor, Mapping):
        skip = {skip_keys} if isinstance(skip_keys, str) else set(skip_keys or ())
        if not skip and hasattr(tensor, "to"):
            return _call_to(tensor, device, non_blocking)
        return rebuild_mapping(
            tensor,
            {
                key: value if key in skip else send_to_device(value, device, non_blocking, skip)
                for key, value in tensor.items()
            },
        )
    if hasattr(tensor, "to") and callable(tensor.to):
        return _call_to(tensor, device, non_blocking)
    if dataclasses.is_dataclass(tensor) and not isinstance(tensor, type):
        changes = {
            field.name: send_to_device(getattr(tensor, field.name), device, non_blocking, skip_keys)
            for field in dataclasses.fields(tensor)
            if field.init
        }
        return dataclasses.replace(tensor, **changes)
    return tensor


def _call_to(obj: Any, device: torch.device | str | int, non_blocking: bool) -> Any:
    try:
        return obj.to(device, non_blocking=non_blocking)
    except TypeError:  # a .to() without non_blocking
        return obj.to(device)


def find_device(data: Any) -> torch.device | None:
    """The device of the first tensor found in ``data`` (depth first), or None."""
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        values: Iterable[Any] = data.values()
    elif isinstance(data, (tuple, list)):
        values = data
    else:
        return None
    for value in values:
        device = find_device(value)
        if device is not None:
            return device
    return None


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Give the cached, unused memory of the accelerator's allocator back to the device.

    ``garbage_collection`` runs ``gc.collect()`` first, so memory held only by unreachable
    objects is freed too (slow: call it between phases, not every step). CUDA is emptied only if
    this process has initialised it, so the call never creates a CUDA context.
    """
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    for name in ("xpu", "mlu", "sdaa", "musa", "npu"):
        backend = getattr(torch, name, None)
        if backend is not None and backend.is_available():
            backend.empty_cache()
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        torch.mps.empty_cache()
