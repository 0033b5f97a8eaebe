"""``accelerator.log(values, reduce=...)``: reduce logged numbers across processes.

Algorithm. Every process walks its ``values`` in sorted key order (into nested dicts too) and
collects the numbers (ints, floats, NumPy scalars, one-element tensors; not bools) into one
float64 tensor. A first all-reduce (``max`` over ``[count, crc32(keys), -count, -crc32(keys)]``)
checks that every process has the same numeric keys: when they differ every process raises the
same ``ValueError`` instead of reducing mismatched numbers or hanging. A second one reduces the
numbers (``mean``, ``sum``, ``max``; ``min`` as ``-max(-x)``), through ``accel_ops.reduce``. The
result has this process's structure with each number replaced by the reduced one; ints stay ints
except for ``mean``. Other values (strings, bools) keep this process's value.

Cost: two small collectives per call, on the device of the process group. Every process must
call ``log`` with ``reduce`` at the same point, with the same numeric keys.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import torch

from accel_core.tracking.config_values import number

REDUCTIONS = ("mean", "sum", "max", "min")


def check_reduction(reduction: str) -> None:
    """Raise ``ValueError`` unless ``reduction`` is one of :data:`REDUCTIONS`."""
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"log(reduce={reduction!r}) is not supported; choose one of "
            f"{', '.join(repr(r) for r in REDUCTIONS)}, or None (only the main process's values)"
        )


def _numbers(values: Mapping[str, object], prefix: str = "") -> list[tuple[str, float, bool]]:
    """(key path, value, was int) for every number in ``values``, in sorted key order."""
    found: list[tuple[str, float, bool]] = []
    for key in sorted(values, key=str):
        value = values[key]
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found.extend(_numbers(value, f"{path}/"))
            continue
        as_number = number(value)
        if as_number is not None:
            found.append((path, float(as_number), isinstance(as_number, int)))
    return found


def _replace(
    values: Mapping[str, object], reduced: dict[str, int | float], prefix: str = ""
) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            result[key] = _replace(value, reduced, f"{path}/")
        else:
            result[key] = reduced.get(path, value)
    return result


def reduce_values(
    values: Mapping[str, object], reduction: str, device: torch.device
) -> dict[str, object]:
    """``values`` with each number reduced across processes (see the module docstring)."""
    from accel_ops import reduce

    check_reduction(reduction)
    found = _numbers(values)
    keys = "\0".join(path for path, _, _ in found)
    signature = float(zlib.crc32(keys.encode("utf-8")))
    count = float(len(found))
    check = torch.tensor([count, signature, -count, -signature], dtype=torch.float64, device=device)
    agreed = reduce(check, "max")
    if agreed[0] != -agreed[2] or agreed[1] != -agreed[3]:
        shown = ", ".join(repr(path) for path, _, _ in found) or "none"
        raise ValueError(
            "log(reduce=...) needs the same numeric keys on every process; this process has "
            f"{len(found)}: {shown}. Call log with reduce= on every process with the same keys, "
            "or log without reduce= on the main process only."
        )
    if not found:
        return dict(values)
    data = torch.tensor([value for _, value, _ in found], dtype=torch.float64, device=device)
    out = -reduce(-data, "max") if reduction == "min" else reduce(data, reduction)
    reduced: dict[str, int | float] = {}
    for (path, _, was_int), value in zip(found, out.tolist(), strict=True):
        reduced[path] = int(value) if was_int and reduction != "mean" else float(value)
    return _replace(values, reduced)
