"""Moving nested structures of tensors (tuples, lists, dicts, model outputs) to a device."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def send_to_device(
    data: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: str | list[str] | None = None,
) -> Any:
    """Return ``data`` with every tensor moved to ``device``; other leaves are kept as they are.

    Mappings keep their type (transformers' ``ModelOutput`` included); keys named in ``skip_keys``
    keep their values where they are.
    """
    if isinstance(skip_keys, str):
        skip_keys = [skip_keys]
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(send_to_device(v, device, non_blocking, skip_keys) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(send_to_device(v, device, non_blocking, skip_keys) for v in data)
    if isinstance(data, Mapping):
        skip = set(skip_keys or ())
        moved = {
            k: v if k in skip else send_to_device(v, device, non_blocking, skip_keys)
            for k, v in data.items()
        }
        try:
            return type(data)(moved)
        except TypeError:
            return moved
    if hasattr(data, "to") and callable(data.to) and not isinstance(data, torch.nn.Module):
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:
            return data.to(device)
    return data
