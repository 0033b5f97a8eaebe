"""The units ``infer_auto_device_map`` places, and the searches over them.

A *unit* is a ``(dotted name, module or tensor)`` pair still to place. A module that does not fit
is replaced by its parts (``split_parts``); tied weights make a unit bring along the units
holding the other names of its tied tensors (``get_module_size_with_ties``);
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


def get_module_size_with_ties(
    tied_params: list[str],
    module_size: int,
    module_sizes: dict[str, int],
    modules_to_treat: Sequence[Entry],
) -> tuple[int, list[str], list[nn.Module | torch.Tensor]]:
    """The size of a unit together with the units holding ``tied_params``, and those units.

    ``tied_params`` are the names tied to the unit's tensors that the unit does not hold; each is
    looked up among ``modules_to_treat`` (the units not placed yet). Returns ``(module_size`` plus
    the size of every distinct unit found, their names, the units)``. Sizes from
    ``compute_module_sizes`` count a tied tensor once, under its first name, so the sum counts
    every tensor once. A tied name held by no unit left (already placed) adds nothing.
    """
    names: list[str] = []
    units: list[nn.Module | torch.Tensor] = []
    for tied_name in tied_params:
        for unit_name, unit in modules_to_treat:
            if holds(unit_name, tied_name):
                if unit_name not in names:
                    names.append(unit_name)
                    units.append(unit)
                break
    return module_size + sum(module_sizes.get(n, 0) for n in names), names, units


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
        size, _, _ = get_module_size_with_ties(
            outside, module_sizes.get(name, 0), module_sizes, search
        )
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
