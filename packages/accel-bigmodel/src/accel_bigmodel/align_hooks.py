"""``AlignDevicesHook``: inputs and weights on the execution device, weights offloaded after use.

Attachers put hooks on a whole model: ``attach_execution_device_hook`` (weights already where
they run), ``attach_align_device_hook`` (offloaded weights, one hook per module with tensors) and
``attach_align_device_hook_on_blocks`` (per block of a device map, what ``dispatch_model`` uses).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from accel_bigmodel.hooks import ModelHook, add_hook_to_module
from accel_bigmodel.offload import PrefixedDataset
from accel_bigmodel.offload_slots import OffloadSlots
from accel_bigmodel.sizes import named_module_tensors
from accel_bigmodel.tensors import set_module_tensor_to_device
from accel_ops import find_device, send_to_device

if TYPE_CHECKING:
    from accel_bigmodel.prefetch import Prefetcher
    from accel_bigmodel.read_ahead import ReadAhead

DeviceLike = int | str | torch.device


def _is_meta(device: DeviceLike | None) -> bool:
    return device is not None and torch.device(device).type == "meta"


@functools.cache
def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    return accelerator is None or bool(accelerator.is_available())


class AlignDevicesHook(ModelHook):
    """Puts inputs (and, when ``offload``, the module's weights) on ``execution_device``.

    Args:
        execution_device: where the forward runs; None leaves inputs and weights where they are.
        offload: keep the weights on the meta device between forward passes, reading them from
            ``weights_map`` just before each forward and dropping them after it.
        io_same_device: give the output back on the device the input came from.
        weights_map: mapping from the module's tensor names to values (an in-memory state dict
            or an ``OffloadedWeightsLoader``); with ``offload`` and no map, the module's current
            weights are copied to the CPU and used.
        offload_buffers: offload buffers too (otherwise they stay on the execution device).
        place_submodules: apply to the whole subtree, not only the module's own tensors.
        skip_keys: keys of dict inputs/outputs that are not moved.
        tied_params_map: accepted for compatibility with Accelerate; not used.

    ``hook.prefetcher`` reads ahead: ``dispatch_model(prefetch=True)`` sets a ``Prefetcher`` (the
    next module's weights read in a background thread while this one computes), and
    ``ACCEL_OFFLOAD_PREFETCH=advise`` a ``ReadAhead`` (hints to the kernel).
    """

    def __init__(
        self,
        execution_device: DeviceLike | None = None,
        offload: bool = False,
        io_same_device: bool = False,
        weights_map: Mapping[str, torch.Tensor] | None = None,
        offload_buffers: bool = False,
        place_submodules: bool = False,
        skip_keys: str | list[str] | None = None,
        tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
    ) -> None:
        self.execution_device = execution_device
        self.offload = offload
        self.io_same_device = io_same_device
        self.weights_map = weights_map
        self.offload_buffers = offload_buffers
        self.place_submodules = place_submodules
        self.skip_keys = skip_keys
        self.tied_params_map = tied_params_map
        self.input_device: torch.device | None = None
        self.original_devices: dict[str, torch.device] = {}
        self.offloaded_names: list[str] = []
        self.prefetcher: Prefetcher | ReadAhead | None = None
        self._slots: OffloadSlots | None = None
        self._moves_inputs = True

    def __repr__(self) -> str:
        return (
            f"AlignDevicesHook(execution_device={self.execution_device}, offload={self.offload}, "
            f"io_same_device={self.io_same_device}, offload_buffers={self.offload_buffers}, "
            f"place_submodules={self.place_submodules}, skip_keys={self.skip_keys!r})"
        )

    def init_hook(self, module: nn.Module) -> nn.Module:
        if _is_meta(self.execution_device):
            return module
        # With no accelerator in this process every tensor is on the CPU: moving the inputs to
        # a CPU execution device (and the output back) would only walk them, every forward.
        self._moves_inputs = not (
            self.execution_device is not None
            and torch.device(self.execution_device).type == "cpu"
            and not _accelerator_available()
        )
        recurse = self.place_submodules
        if not self.offload:
            if self.execution_device is not None:
                for name, _ in list(named_module_tensors(module, recurse=recurse)):
                    set_module_tensor_to_device(module, name, self.execution_device)
            return module
        offloaded = list(
            named_module_tensors(
                module,
                include_buffers=self.offload_buffers,
                recurse=recurse,
                remove_non_persistent=True,
            )
        )
        self.original_devices = {name: tensor.device for name, tensor in offloaded}
        if self.weights_map is None:
            self.weights_map = {name: tensor.detach().to("cpu") for name, tensor in offloaded}
        self.offloaded_names = [name for name, _ in offloaded]
        self._slots = OffloadSlots(module, self.offloaded_names)
        if self.execution_device is not None:
            kept = set(self.offloaded_names)
            for name, _ in list(module.named_buffers(recurse=recurse)):
                if name not in kept:
                    set_module_tensor_to_device(module, name, self.execution_device)
        return module

    def load_weights(self) -> dict[str, torch.Tensor]:
        """Read this module's offloaded tensors from the weights map (CPU tensors)."""
        assert self.weights_map is not None  # set by init_hook whenever offload is True
        return {name: self.weights_map[name] for name in self.offloaded_names}

    def offloaded_bytes(self) -> int:
        """Bytes of this module's offloaded tensors (0 without offload)."""
        if self._slots is None:
            return 0
        return sum(
            slot.placeholder.numel() * slot.placeholder.element_size()
            for slot in self._slots.slots.values()
        )

    def advise_weights(self) -> None:
        """Hint the weights map to start reading this module's offloaded tensors from disk."""
        advise = getattr(self.weights_map, "advise", None)
        if advise is not None:
            for name in self.offloaded_names:
                advise(name)

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        if self.io_same_device and self._moves_inputs:
            self.input_device = find_device([args, kwargs])
        if self.offload and self.execution_device is not None:
            values = self.prefetcher.take(self) if self.prefetcher is not None else None
            if values is None:
                values = self.load_weights()
            assert self._slots is not None  # made by init_hook whenever offload is True
            self._slots.fill(values, self.execution_device)
            if self.prefetcher is not None:
                self.prefetcher.after(self)
        if self.execution_device is None or not self._moves_inputs:
            return args, kwargs
        return (
            send_to_device(args, self.execution_device, skip_keys=self.skip_keys),
            send_to_device(kwargs, self.execution_device, skip_keys=self.skip_keys),
        )

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        if self.offload and self.execution_device is not None:
            assert self._slots is not None
            self._slots.empty()
            release = getattr(self.weights_map, "release", None)
            if release is not None:
                for name in self.offloaded_names:
                    release(name)
        if self.io_same_device and self.input_device is not None and self._moves_inputs:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload and self.weights_map is not None:
            for name, device in self.original_devices.items():
                if device.type != "meta":
                    value = self.weights_map[name]
                    set_module_tensor_to_device(module, name, device, value=value)
        return module


def _has_tensors(module: nn.Module, recurse: bool) -> bool:
    return next(iter(named_module_tensors(module, recurse=recurse)), None) is not None


def _child_name(parent: str, child: str) -> str:
    return f"{parent}.{child}" if parent else child


def attach_execution_device_hook(
    module: nn.Module,
    execution_device: DeviceLike,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
) -> None:
    """Add an ``AlignDevicesHook(execution_device)`` to every submodule with tensors and no hook.

    Modules whose class is in ``preload_module_classes`` are not descended into.
    """
    if not hasattr(module, "_hf_hook") and _has_tensors(module, recurse=True):
        add_hook_to_module(
            module,
            AlignDevicesHook(
                execution_device, skip_keys=skip_keys, tied_params_map=tied_params_map
            ),
        )
    if preload_module_classes and type(module).__name__ in preload_module_classes:
        return
    for child in module.children():
        attach_execution_device_hook(
            child, execution_device, skip_keys, preload_module_classes, tied_params_map
        )


def attach_align_device_hook(
    module: nn.Module,
    execution_device: DeviceLike | None = None,
    offload: bool = False,
    weights_map: Mapping[str, torch.Tensor] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
) -> None:
    """Add an ``AlignDevicesHook`` to every submodule of ``module`` that has its own tensors.

    ``weights_map`` is keyed from ``module`` (``module_name`` is the prefix of ``module``'s
    tensors in it). A module whose class is in ``preload_module_classes`` gets one hook for its
    whole subtree, so all its weights are loaded before its forward.
    """
    full = bool(
        offload and preload_module_classes and type(module).__name__ in preload_module_classes
    )
    if full or _has_tensors(module, recurse=False):
        prefixed = (
            PrefixedDataset(weights_map, f"{module_name}.")
            if weights_map is not None and module_name
            else weights_map
        )
        hook = AlignDevicesHook(
            execution_device,
            offload=offload,
            weights_map=prefixed,
            offload_buffers=offload_buffers,
            place_submodules=full,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook, append=True)
    if full:
        return
    for name, child in module.named_children():
        attach_align_device_hook(
            child,
            execution_device,
            offload,
            weights_map,
            offload_buffers,
            _child_name(module_name, name),
            skip_keys,
            preload_module_classes,
            tied_params_map,
        )


def attach_align_device_hook_on_blocks(
    module: nn.Module,
    execution_device: DeviceLike | Mapping[str, DeviceLike] | None = None,
    offload: bool | Mapping[str, bool] = False,
    weights_map: Mapping[str, torch.Tensor] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
) -> None:
    """Attach hooks block by block: ``execution_device`` and ``offload`` map block names to values.

    A block that is not offloaded is moved to its execution device once; an offloaded block gets
    offloading hooks on its submodules; the model itself (``""``) gets a hook that moves inputs
    to the main device and outputs back to the input's device.
    """
    if not isinstance(execution_device, Mapping) and not isinstance(offload, Mapping):
        if offload:
            attach_align_device_hook(
                module,
                execution_device,
                True,
                weights_map,
                offload_buffers,
                module_name,
                skip_keys,
                preload_module_classes,
                tied_params_map,
            )
        else:
            hook = AlignDevicesHook(
                execution_device,
                io_same_device=True,
                place_submodules=True,
                skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )
            add_hook_to_module(module, hook)
        return
    if not isinstance(execution_device, Mapping):
        execution_device = dict.fromkeys(offload, execution_device)  # type: ignore[arg-type]
    if not isinstance(offload, Mapping):
        offload = dict.fromkeys(execution_device, offload)
    is_top = module_name == ""
    if module_name in execution_device and module_name in offload:
        block_device = execution_device[module_name]
        if not offload[module_name]:
            add_hook_to_module(
                module,
                AlignDevicesHook(
                    block_device,
                    offload_buffers=offload_buffers,
                    io_same_device=is_top,
                    place_submodules=True,
                    skip_keys=skip_keys,
                    tied_params_map=tied_params_map,
                ),
            )
        else:
            attach_align_device_hook(
                module,
                block_device,
                True,
                weights_map,
                offload_buffers,
                module_name,
                skip_keys,
                preload_module_classes,
                tied_params_map,
            )
            if not hasattr(module, "_hf_hook"):
                add_hook_to_module(
                    module,
                    AlignDevicesHook(block_device, io_same_device=is_top, skip_keys=skip_keys),
                )
        attach_execution_device_hook(
            module, block_device, skip_keys, preload_module_classes, tied_params_map
        )
    elif is_top:
        add_hook_to_module(
            module,
            AlignDevicesHook(execution_device.get(""), io_same_device=True, skip_keys=skip_keys),
        )
    for name, child in module.named_children():
        attach_align_device_hook_on_blocks(
            child,
            execution_device,
            offload,
            weights_map,
            offload_buffers,
            _child_name(module_name, name),
            skip_keys,
            preload_module_classes,
            tied_params_map,
        )
