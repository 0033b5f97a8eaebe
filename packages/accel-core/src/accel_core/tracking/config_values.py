"""Turn config and log values into what a backend can store, without ever failing.

A run's config holds whatever a script had: nested dicts, lists, ``None``, paths, enums, tensors,
NumPy scalars. Backends take less: TensorBoard's hparams only int, float, str, bool; MLflow params
only strings of at most 6000 characters; JSON no paths or tensors. Three conversions cover them:

- :func:`flatten` -- nested mappings to one level, keys joined with ``"."``
  (``{"optim": {"lr": 0.1}}`` -> ``{"optim.lr": 0.1}``); lists stay values;
- :func:`to_scalar` -- one value to int, float, str or bool (lists and dicts as JSON text, ``None``
  as ``"None"``, paths as their text, enums as their value, one-element tensors as numbers);
- :func:`to_json` -- a whole structure to JSON-safe values (tuples to lists, paths to text,
  tensors to numbers or lists, anything else to its ``str``).
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Mapping

from accel_core.tracking.base import JSONValue

Scalar = int | float | str | bool


def flatten(values: Mapping[object, object], separator: str = ".") -> dict[str, object]:
    """``values`` with nested mappings merged into one level, keys joined by ``separator``."""
    flat: dict[str, object] = {}
    for key, value in values.items():
        name = _key(key)
        if isinstance(value, Mapping) and value:
            for inner, leaf in flatten(value, separator).items():
                flat[f"{name}{separator}{inner}"] = leaf
        else:
            flat[name] = value
    return flat


def _key(key: object) -> str:
    if isinstance(key, enum.Enum):
        return str(key.value)
    return str(key)


def number(value: object) -> int | float | None:
    """``value`` as an int or float when it is a real number (not a bool), else ``None``.

    Python numbers, NumPy scalars and one-element tensors or arrays count as numbers.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    item = getattr(value, "item", None)
    size = getattr(value, "numel", None) or getattr(value, "size", None)
    if callable(item) and _single(size):
        try:
            result = item()
        except (ValueError, RuntimeError, TypeError):
            return None
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            return result
    return None


def _single(size: object) -> bool:
    """Whether a ``numel`` method or a ``size`` attribute says one element."""
    if callable(size):
        try:
            size = size()
        except TypeError:
            return False
    return size == 1


def to_scalar(value: object) -> Scalar:
    """``value`` as an int, float, str or bool (see the module docstring for each kind)."""
    if isinstance(value, (bool, str)):
        return value
    found = number(value)
    if found is not None:
        return found
    if value is None:
        return "None"
    if isinstance(value, enum.Enum):
        return to_scalar(value.value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)  # type: ignore[return-value]
    converted = to_json(value)
    if isinstance(converted, (list, dict)):
        return json.dumps(converted, sort_keys=True)
    return converted if converted is not None else "None"


def to_json(value: object) -> JSONValue:
    """``value`` with every part made JSON-safe; non-finite floats stay floats (``NaN``)."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    if isinstance(value, Mapping):
        return {_key(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [to_json(item) for item in items]
    found = number(value)
    if found is not None:
        return found
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return to_json(tolist())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def is_finite_number(value: object) -> bool:
    """Whether ``value`` is a number (see :func:`number`) that is not NaN or infinite."""
    found = number(value)
    return found is not None and math.isfinite(found)
