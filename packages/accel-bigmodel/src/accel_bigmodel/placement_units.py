"""The units ``infer_auto_device_map`` places, and the searches over them.

A *unit* is a ``(dotted name, module or tensor)`` pair still to place. A module that does not fit
is replaced by its parts (``split_parts``); tied weights make a unit bring along the units
holding the other names of its tied tensors (``size_with_tied_units``; Accelerate's
``get_module_size_with_ties`` counts them its way);
``fallback_allocate`` finds a later unit small enough for a device that would stay empty;
``clean_device_map`` merges the keys of a finished map.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import torch
from torch import nn

from accel_bigmodel.dtypes import convert_file_size_to_int
from accel_bigmodel.memory import Device
from accel_bigmodel.sizes import top_level_entries

Entry = tuple[str, nn.Module | torch.Tensor]


def holds(unit: str, tensor_name: str) -> bool:
    """Whether the unit named ``unit`` holds (or is) the tensor or module ``tensor_name``."""
    return tensor_name == unit or tensor_name.startswith(unit + ".")


def tied_outside(unit: str, tied_parameters: Sequence[Sequence[str]]) -> list[str]:
    """Names tied to a tensor of ``unit`` that ``unit`` does not hold, group by group."""
    outside: list[str] = []
    for group in tied_parameters:
        held = [holds(unit, name) for name in group]
        if any(held) and not all(held):
            outside += [name for name, inside in zip(group, held, strict=True) if not inside]
    return outside


def split_parts(name: str, module: nn.Module) -> list[Entry]:
    """What ``module`` is split into: its own parameters, its children, its own buffers."""
    return [(f"{name}.{part}", item) for part, item in top_level_entries(module)]


def splittable(item: nn.Module | torch.Tensor, no_split: Sequence[str]) -> TypeGuard[nn.Module]:
    """Whether ``item`` is a module with children whose class may be split."""
    return (
        isinstance(item, nn.Module)
        and next(item.children(), None) is not None
        and type(item).__name__ not in no_split
    )


def tied_units(
    tied_params: list[str], modules_to_treat: Sequence[Entry]
) -> tuple[list[str], list[nn.Module | torch.Tensor], dict[str, list[str]]]:
    """The distinct units of ``modules_to_treat`` holding ``tied_params``: their names, the units,
    and, by unit name, the tied names each holds. A tied name held by no unit left (already
    placed) is in none."""
    names: list[str] = []
    units: list[nn.Module | torch.Tensor] = []
    held: dict[str, list[str]] = {}
    for tied_name in tied_params:
        for unit_name, unit in modules_to_treat:
            if holds(unit_name, tied_name):
                if unit_name not in held:
                    names.append(unit_name)
                    units.append(unit)
                    held[unit_name] = []
                held[unit_name].append(tied_name)
                break
    return names, units, held


def size_with_tied_units(
    tied_params: list[str],
    module_size: int,
    module_sizes: dict[str, int],
    modules_to_treat: Sequence[Entry],
) -> tuple[int, list[str], list[nn.Module | torch.Tensor]]:
    """What placing a unit takes with the units holding ``tied_params``, for sizes from
    ``compute_module_sizes`` (the placement's own count): ``module_size`` plus the size of every
    distinct unit found. Those sizes count a tied tensor once, under its first name, so the sum
    counts every tensor once."""
    names, units, _ = tied_units(tied_params, modules_to_treat)
    return module_size + sum(module_sizes.get(n, 0) for n in names), names, units


def get_module_size_with_ties(
    tied_params: list[str],
    module_size: int,
    module_sizes: dict[str, int],
    modules_to_treat: Sequence[Entry],
) -> tuple[int, list[str], list[nn.Module | torch.Tensor]]:
    """The size of a unit together with the units holding ``tied_params``, and those units
    (Accelerate's function, with its count).

    ``tied_params`` are the names tied to the unit's tensors that the unit does not hold; each is
    looked up among ``modules_to_treat`` (the units not placed yet). Returns ``(module_size`` plus,
    for every distinct unit found, its size less the sizes ``module_sizes`` gives the tied names
    it holds (the unit of ``module_size`` is taken to count those tensors already), their names,
    the units)``. Fifteen ``Linear(10, 10)`` sharing one weight, each sized 440 bytes with the
    weight, come to 440 + 14 * (440 - 400) = 1000 bytes, as in Accelerate. A tied name held by no
    unit left adds nothing; unlike Accelerate, a unit holding two tied names is added once
    (Accelerate adds it once per name). ``infer_auto_device_map`` counts with
    :func:`size_with_tied_units` instead, whose sizes count a shared tensor once.
    """
    names, units, held = tied_units(tied_params, modules_to_treat)
    size = module_size
    for name in names:
        size += module_sizes.get(name, 0) - sum(module_sizes.get(t, 0) for t in held[name])
    return size, names, units


def fallback_allocate(
    modules: list[Entry],
    module_sizes: dict[str, int],
    size_limit: int | str,
    no_split_module_classes: list[str] | None = None,
    tied_parameters: list[list[str]] | None = None,
) -> tuple[str | None, nn.Module | torch.Tensor | None, list[Entry]]:
    """Find the first unit of ``modules`` that fits in ``size_limit`` with its tied units.

    Units are tried in order; one that is too big is replaced by its parameters and children
    (unless it cannot be split) and the search goes on inside it first. Returns ``(name, unit,
    remaining)``, where ``remaining`` is a new list: ``modules`` with the unit taken out and the
    units above it replaced by their parts (own buffers included, unlike Accelerate, which drops
    them), or ``(None, None, modules)`` when nothing fits or ``size_limit`` is negative.
    """
    try:
        limit = convert_file_size_to_int(size_limit)
    except ValueError:
        return None, None, modules
    no_split = list(no_split_module_classes or ())
    tied = list(tied_parameters or ())
    search = list(modules)
    found: Entry | None = None
    while search:
        name, unit = search.pop(0)
        outside = tied_outside(name, tied)
        size, _, _ = size_with_tied_units(outside, module_sizes.get(name, 0), module_sizes, search)
        if size <= limit:
            found = (name, unit)
            break
        if splittable(unit, no_split):  # buffers are no candidates, as in Accelerate
            inner = [*unit.named_parameters(recurse=False), *unit.named_children()]
            search = [(f"{name}.{n}", item) for n, item in inner] + search
    if found is None:
        return None, None, modules
    name = found[0]
    remaining = list(modules)
    for cut in [i for i, char in enumerate(name) if char == "."]:
        parent = name[:cut]
        names = [n for n, _ in remaining]
        if parent in names:
            index = names.index(parent)
            parent_unit = remaining[index][1]
            if isinstance(parent_unit, nn.Module):
                remaining[index : index + 1] = split_parts(parent, parent_unit)
    index = [n for n, _ in remaining].index(name)
    name, unit = remaining.pop(index)
    return name, unit, remaining


def clean_device_map(device_map: dict[str, Device], module_name: str = "") -> dict[str, Device]:
    """Merge keys: when every key under a module has the same device, keep only the module's key.

    Works in place (and returns the map); a module with a single key under it keeps that key.
    The merged key takes the place of the first key it replaces.
    """
    prefix = f"{module_name}." if module_name else ""
    keys = [k for k in device_map if k.startswith(prefix)]
    values = {device_map[k] for k in keys}
    if len(keys) > 1 and len(values) == 1:
        merged: dict[str, Device] = {}
        for key, value in device_map.items():
            if key == keys[0]:
                merged[module_name] = value
            elif key not in keys:
                merged[key] = value
        device_map.clear()
        device_map.update(merged)
    depth = module_name.count(".") + 2 if module_name else 1
    children = dict.fromkeys(
        ".".join(k.split(".")[:depth])
        for k in device_map
        if k.startswith(prefix) and len(k) > len(module_name)
    )
    for child in children:
        clean_device_map(device_map, child)
    return device_map
