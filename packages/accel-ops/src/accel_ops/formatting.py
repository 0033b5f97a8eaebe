"""Small formatting, merging and attribute helpers kept for Accelerate compatibility."""

from __future__ import annotations

import functools
from typing import Any


def convert_bytes(size: float) -> str:
    """A byte count as text with a binary unit, e.g. ``convert_bytes(1536)`` -> ``'1.5 KB'``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def get_pretty_name(obj: Any) -> str:
    """The qualified name of a class or function, or of an instance's class."""
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    if hasattr(obj, "__qualname__"):
        return str(obj.__qualname__)
    if hasattr(obj, "__name__"):
        return str(obj.__name__)
    return str(obj)


def merge_dicts(source: dict[Any, Any], destination: dict[Any, Any]) -> dict[Any, Any]:
    """Merge ``source`` into ``destination`` recursively, in place; returns ``destination``."""
    for key, value in source.items():
        if isinstance(value, dict):
            merge_dicts(value, destination.setdefault(key, {}))
        else:
            destination[key] = value
    return destination


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recursive_getattr(model, "encoder.layer.0")``.

    Raises ``AttributeError`` for the first name on the path that is missing.
    """
    return functools.reduce(getattr, attr.split("."), obj)
