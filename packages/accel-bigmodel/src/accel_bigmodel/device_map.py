"""Device maps: which device holds each module (``infer_auto_device_map``) and their checks.

A device map is a plain ``dict[str, int | str]`` from module (or tensor) names to a GPU index,
``"cpu"``, ``"mps"`` or ``"disk"``; the key ``""`` is the whole model. A tensor belongs to the
longest key that is a prefix of its name.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

import torch
from torch import nn

from accel_bigmodel.dtypes import CustomDtype, parse_dtype
from accel_bigmodel.memory import Device, get_balanced_memory, get_max_memory, normalize_device
from accel_bigmodel.sizes import (
    _tensor_bytes,
    compute_module_sizes,
    get_max_layer_size,
    named_module_tensors,
)
from accel_bigmodel.tied import find_tied_parameters

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def device_for(name: str, device_map: Mapping[str, object]) -> object:
    """The device that ``device_map`` gives the tensor or module ``name`` (longest prefix key)."""
    prefix = name
    while True:
        if prefix in device_map:
            return device_map[prefix]
        if not prefix:
            raise KeyError(name)
        cut = prefix.rfind(".")
        prefix = prefix[:cut] if cut > 0 else ""


def _entries(module: nn.Module, prefix: str) -> list[tuple[str, nn.Module | torch.Tensor]]:
    """The placement units directly under ``module``: its own tensors, then its children."""
    join = (lambda n: f"{prefix}.{n}") if prefix else (lambda n: n)
    own: list[tuple[str, nn.Module | torch.Tensor]] = [
        (join(n), t) for n, t in named_module_tensors(module, recurse=False)
    ]
    return own + [(join(n), m) for n, m in module.named_children()]


def _owner(tensor_name: str) -> str:
    return tensor_name.rpartition(".")[0]


def _inside(name: str, prefix: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def clean_device_map(device_map: dict[str, Device], module_name: str = "") -> dict[str, Device]:
    """Merge keys: when every key under a module has the same device, keep only the module's key."""
    keys = [k for k in device_map if _inside(k, module_name)]
    values = {device_map[k] for k in keys}
    if len(keys) > 1 and len(values) == 1:
        first = keys[0]
        merged: dict[str, Device] = {}
        for key, value in device_map.items():
            if key == first:
                merged[module_name] = value
            elif key not in keys:
                merged[key] = value
        device_map.clear()
        device_map.update(merged)
        return device_map
    depth = len(module_name.split(".")) + 1 if module_name else 1
    children = dict.fromkeys(".".join(k.split(".")[:depth]) for k in keys if k != module_name)
    for child in children:
        clean_device_map(device_map, child)
    return device_map


def infer_auto_device_map(
    model: nn.Module,
    max_memory: dict[Device, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    verbose: bool = False,
    clean_result: bool = True,
    offload_buffers: bool = False,
    fallback_allocation: bool = False,
) -> dict[str, Device]:
    """Place the modules of ``model`` on GPUs in order, then the CPU, then ``"disk"``.

    Modules are taken in definition order. A module that does not fit in what is left on the
    current device is split into its children, unless its class name is in
    ``no_split_module_classes``, in which case it and everything after it go to the next device.
    Tied parameters are placed together, on the device of the first of them. When some weights
    must be offloaded, the execution device (the first GPU, or the CPU without GPUs) keeps room
    for the biggest layer, which is loaded there when it runs. ``"disk"`` is always the last
    resort. ``fallback_allocation`` lets a GPU that would otherwise stay empty take the first
    later module that fits it. Buffers are counted with their modules (``offload_buffers`` is
    accepted for compatibility and does not change the map). Needs no GPU: pass
    ``max_memory={0: ..., 1: ..., "cpu": ...}``.

    Returns a plain ``dict[str, int | str]``; with ``clean_result`` modules whose children all
    share a device are written as one key.
    """
    memory = get_max_memory(max_memory)
    devices: list[Device] = list(memory)
    budget: dict[Device, float] = {d: float(v) for d, v in memory.items()}
    if "disk" not in budget:
        devices.append("disk")
    budget["disk"] = math.inf
    no_split = set(no_split_module_classes or ())
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    gpus = [d for d in devices if isinstance(d, int)]
    runners = gpus or [d for d in devices if d == "mps"] or ["cpu"]
    main = runners[0]
    queue = _entries(model, "")
    layer_size, layer_names = get_max_layer_size(
        [(n, m) for n, m in queue if isinstance(m, nn.Module)], sizes, list(no_split)
    )
    for name, item in queue:  # a tensor directly on the model is a layer too
        if isinstance(item, torch.Tensor) and sizes.get(name, 0) > layer_size:
            layer_size, layer_names = sizes[name], [name]
    capacity = sum(memory.get(d, 0) for d in runners)
    if sizes[""] > capacity:
        budget[main] = budget.get(main, 0.0) - layer_size
        if budget[main] < 0:
            raise ValueError(
                f"max_memory is too small: the model ({sizes['']} bytes) does not fit on "
                f"{runners}, so offloaded layers will run on {main!r}, which must hold the "
                f"biggest unsplittable module {layer_names} ({layer_size} bytes) at once, but "
                f"max_memory gives {main!r} only {memory.get(main, 0)} bytes. Give {main!r} at "
                f"least {layer_size} bytes (for example max_memory={{{main!r}: "
                f"'{math.ceil(layer_size / 2**20)}MiB', ...}})."
            )
        if verbose:
            print(
                f"keeping {layer_size} bytes free on {main!r} for the biggest layer {layer_names}"
            )

    tied_groups = find_tied_parameters(model)
    group_of = {n: i for i, g in enumerate(tied_groups) for n in g}
    tensor_bytes = _all_tensor_bytes(model, dtype, special_dtypes)

    def combined_size(names: list[str]) -> float:
        """Bytes of the tensors under ``names``, each tied group counted once."""
        seen: set[object] = set()
        total = 0
        for tensor_name, nbytes in tensor_bytes.items():
            if any(_inside(tensor_name, n) for n in names):
                key = group_of.get(tensor_name, tensor_name)
                if key not in seen:
                    seen.add(key)
                    total += nbytes
        return float(total)

    placed: dict[str, Device] = {}
    used: dict[Device, float] = dict.fromkeys(devices, 0.0)
    index = 0
    while queue:
        name, item = queue.pop(0)
        if any(_inside(name, p) for p in placed):
            continue
        if any(p != name and _inside(p, name) for p in placed):  # a tied partner inside: split it
            queue[0:0] = _entries(item, name) if isinstance(item, nn.Module) else []
            continue
        device = devices[index]
        inner_tied = [t for t in group_of if _inside(t, name)]
        partners: list[str] = []
        for tensor_name in inner_tied:
            for partner in tied_groups[group_of[tensor_name]]:
                owner = _owner(partner)
                if _inside(partner, name) or any(_inside(partner, p) for p in placed):
                    continue
                if owner not in partners:
                    partners.append(owner)
        need = combined_size([name, *partners]) if inner_tied else float(sizes.get(name, 0))
        if need <= budget[device] - used[device]:
            for target in [name, *partners]:
                placed[target] = device
            used[device] += need
            if verbose:
                print(f"{name} ({int(need)} bytes) -> {device!r}")
            continue
        splittable = (
            isinstance(item, nn.Module)
            and type(item).__name__ not in no_split
            and len(list(item.children())) > 0
        )
        if splittable:
            if verbose:
                print(f"{name} ({int(need)} bytes) does not fit on {device!r}: splitting it")
            queue[0:0] = _entries(item, name)
            continue
        if fallback_allocation and used[device] == 0 and device != "disk":
            found = _first_fitting(queue, sizes, budget[device], no_split)
            if found is not None:
                placed[found] = device
                used[device] += sizes.get(found, 0)
        if verbose:
            print(
                f"{name} ({int(need)} bytes) does not fit on {device!r}: moving to the next device"
            )
        index += 1
        queue.insert(0, (name, item))

    ordered = {n: placed[n] for n in _definition_order(model, placed)}
    return clean_device_map(ordered) if clean_result else ordered


def _all_tensor_bytes(
    model: nn.Module, dtype: str | torch.dtype | None, special_dtypes: dict | None
) -> dict[str, int]:
    """Bytes of every tensor name, tied names included (each under all its names)."""
    target = parse_dtype(dtype)
    special = {
        k: v if isinstance(v, CustomDtype) else parse_dtype(v)
        for k, v in (special_dtypes or {}).items()
    }
    tensors = [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]
    return {name: _tensor_bytes(name, tensor, target, special) for name, tensor in tensors}


def _first_fitting(
    queue: list[tuple[str, nn.Module | torch.Tensor]],
    sizes: dict[str, int],
    free: float,
    no_split: set[str],
) -> str | None:
    """The first unsplittable module in ``queue`` (searched depth first) that fits in ``free``."""
    stack = list(queue)
    while stack:
        name, item = stack.pop(0)
        if sizes.get(name, 0) <= free and sizes.get(name, 0) > 0:
            return name
        if isinstance(item, nn.Module) and type(item).__name__ not in no_split:
            stack[0:0] = _entries(item, name)
    return None


def _definition_order(model: nn.Module, placed: Mapping[str, Device]) -> list[str]:
    order = {n: i for i, (n, _) in enumerate(model.named_modules(remove_duplicate=False))}
    tensors = {n: i for i, (n, _) in enumerate(named_module_tensors(model, recurse=True))}

    def key(name: str) -> tuple[int, int]:
        if name in order:
            return (order[name], -1)
        return (order.get(_owner(name), 0), tensors.get(name, 0))

    return sorted(placed, key=key)


def check_device_map(model: nn.Module, device_map: Mapping[str, object]) -> None:
    """Raise a ValueError if ``device_map`` has unknown devices or names, or misses some tensor."""
    modules = {n for n, _ in model.named_modules()}
    tensor_names = [n for n, _ in named_module_tensors(model, recurse=True)]
    known = modules | set(tensor_names)
    for key, value in device_map.items():
        normalize_device(value, where=f"module {key!r} in device_map")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"device_map names {key!r}, which is not a module of the model{hint}")
    missing = []
    for name in tensor_names:
        try:
            device_for(name, device_map)
        except KeyError:
            missing.append(name)
    if missing:
        raise ValueError(
            f"device_map does not place {len(missing)} tensors of the model, for example "
            f"{missing[:5]}; add their modules (or '' for the whole model) to the map"
        )


def resolve_device_map(
    model: nn.Module,
    device_map: str | Mapping[str, object] | None,
    max_memory: dict[Device, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    offload_buffers: bool = False,
) -> dict[str, Device] | None:
    """Turn a strategy name ("auto", "balanced", "balanced_low_0", "sequential") into a map.

    "auto" and "balanced" spread the model evenly over the GPUs, "balanced_low_0" keeps GPU 0 as
    empty as possible, "sequential" fills each GPU before moving to the next. A dict is checked
    and normalised (``"cuda:1"`` -> ``1``); None stays None.
    """
    if device_map is None:
        return None
    if isinstance(device_map, str):
        if device_map not in STRATEGIES:
            raise ValueError(
                f"unknown device_map strategy {device_map!r}: expected one of {list(STRATEGIES)} "
                f"or a dict such as {{'': 'cpu'}}"
            )
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model,
                max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=dtype,
                low_zero=device_map == "balanced_low_0",
            )
        return infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            offload_buffers=offload_buffers,
        )
    if not isinstance(device_map, Mapping):
        raise TypeError(f"device_map must be a dict or a strategy name, got {device_map!r}")
    return {
        k: normalize_device(v, where=f"module {k!r} in device_map") for k, v in device_map.items()
    }
