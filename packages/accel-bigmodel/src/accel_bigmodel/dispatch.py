"""``dispatch_model``: put each block of a model where a device map says, hooks in between."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from accel_bigmodel.align_hooks import AlignDevicesHook, attach_align_device_hook_on_blocks
from accel_bigmodel.device_map import check_device_map, device_for, placing_entries
from accel_bigmodel.memory import Device, normalize_device
from accel_bigmodel.offload import (
    INDEX_NAME,
    OffloadedWeightsLoader,
    extract_submodules_state_dict,
    offload_state_dict,
)
from accel_bigmodel.prefetch import Prefetcher, prefetch_mode
from accel_bigmodel.read_ahead import ReadAhead
from accel_bigmodel.sizes import named_module_tensors
from accel_bigmodel.tensors import set_module_tensor_to_device
from accel_bigmodel.tied import find_tied_parameters, retie_parameters


def _torch_device(device: Device) -> torch.device | str:
    if isinstance(device, int):
        return torch.device("cuda", device)
    return device


def dispatch_model(
    model: nn.Module,
    device_map: Mapping[str, object],
    main_device: int | str | torch.device | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
    offload_dir: str | os.PathLike | None = None,
    offload_index: dict[str, dict] | None = None,
    offload_buffers: bool = False,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    prefetch: bool | None = None,
) -> nn.Module:
    """Place ``model`` following ``device_map`` and attach the hooks that make it run there.

    Blocks mapped to a GPU (or to the CPU when there is no GPU) are moved there once. Blocks
    mapped to ``"cpu"`` while a GPU is the main device, and blocks mapped to ``"disk"``, are
    offloaded: their weights stay in ``state_dict`` (CPU) or in ``offload_dir`` and are read onto
    the main device just before each forward. Inputs are moved to each block's device; the
    output comes back on the device of the input. The map is stored as ``model.hf_device_map``.

    ``prefetch=True`` reads the next offloaded block's weights in a background thread while the
    current one computes (outputs are bit-identical; one extra block's weights in memory);
    ``False`` reads nothing ahead; ``None`` (the default) follows ``ACCEL_OFFLOAD_PREFETCH``
    (``advise``: only ask the kernel to read the next blocks ahead), else reads nothing ahead (see
    :func:`accel_bigmodel.prefetch.prefetch_mode`).
    """
    mode = prefetch_mode(prefetch)
    if not getattr(device_map, "_accel_checked", False):
        # Looked up in this module when called: a replacement set at Accelerate's path
        # (``accelerate.big_modeling.check_device_map``, as transformers does) lands here.
        check_device_map(model, device_map)
    device_map = placing_entries(
        model,
        {
            k: normalize_device(v, where=f"module {k!r} in device_map")
            for k, v in device_map.items()
        },
    )
    devices = set(device_map.values())
    if len(devices) == 1 and not force_hooks and next(iter(devices)) != "disk":
        device = next(iter(devices))
        target = torch.device(_torch_device(device)) if device != "meta" else None
        tensors = named_module_tensors(model, recurse=True)
        if target is not None and any(t.device != target for _, t in tensors):
            model.to(target)
        model.hf_device_map = dict(device_map)
        return model

    if main_device is None:
        gpus = [d for d in device_map.values() if d not in ("cpu", "disk", "meta")]
        main_device = gpus[0] if gpus else "cpu"
    main = normalize_device(main_device, where="main_device")
    offloaded_kinds = {"disk"} if main in ("cpu", "mps") else {"cpu", "disk"}
    cpu_blocks = [n for n, d in device_map.items() if d == "cpu" and "cpu" in offloaded_kinds]
    disk_blocks = [n for n, d in device_map.items() if d == "disk"]
    if state_dict is None and cpu_blocks:
        state_dict = extract_submodules_state_dict(model.state_dict(), cpu_blocks)
    if disk_blocks and offload_dir is None and offload_index is None:
        raise ValueError(
            f"the device map sends {disk_blocks[:3]}{'...' if len(disk_blocks) > 3 else ''} to "
            f"'disk': pass offload_dir=<folder> (or offload_index) to dispatch_model"
        )
    if disk_blocks and offload_index is None and not (Path(offload_dir) / INDEX_NAME).exists():
        disk_state = extract_submodules_state_dict(model.state_dict(), disk_blocks)
        on_meta = [n for n, t in disk_state.items() if t.device.type == "meta"]
        if on_meta:
            raise ValueError(
                f"{on_meta[:3]} are on the meta device and {offload_dir} has no {INDEX_NAME}: "
                f"load the weights first (load_checkpoint_and_dispatch does both)"
            )
        offload_state_dict(offload_dir, disk_state)

    execution = {
        n: _torch_device(main if d in offloaded_kinds else d) for n, d in device_map.items()
    }
    execution[""] = _torch_device(main)
    offload = {n: d in offloaded_kinds for n, d in device_map.items()}
    weights_map = None
    if any(offload.values()):
        weights_map = OffloadedWeightsLoader(
            state_dict=state_dict, save_folder=offload_dir, index=offload_index
        )
    tied = find_tied_parameters(model)
    modules = {n for n, _ in model.named_modules()}
    for key in device_map:  # tensors named directly in the map
        if key not in modules:
            value = weights_map[key] if offload[key] and weights_map is not None else None
            set_module_tensor_to_device(model, key, execution[key], value=value)
    attach_align_device_hook_on_blocks(
        model,
        execution_device=execution,
        offload=offload,
        weights_map=weights_map,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
    )
    _retie_placed(model, tied, device_map)
    if mode is not None:
        hooks = [
            m._hf_hook
            for _, m in model.named_modules()
            if isinstance(getattr(m, "_hf_hook", None), AlignDevicesHook) and m._hf_hook.offload
        ]
        if hooks:
            prefetcher = Prefetcher(hooks) if mode == "thread" else ReadAhead(hooks)
            for hook in hooks:
                hook.prefetcher = prefetcher
            model._accel_prefetcher = prefetcher
    model.hf_device_map = dict(device_map)
    return model


def _retie_placed(
    model: nn.Module, tied: list[list[str]], device_map: Mapping[str, Device]
) -> None:
    """Re-tie groups whose members were moved separately to the same (non-offloaded) device."""
    keep = []
    for group in tied:
        devices = {str(device_for(name, device_map)) for name in group}
        if len(devices) == 1 and devices != {"disk"}:
            keep.append(group)
    if keep:
        tensors = dict(named_module_tensors(model, recurse=True))
        keep = [
            g
            for g in keep
            if all(tensors.get(n) is None or tensors[n].device.type != "meta" for n in g)
        ]
        retie_parameters(model, keep)
