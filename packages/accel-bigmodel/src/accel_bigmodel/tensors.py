"""Putting one tensor of a module on a device, optionally with a new value and dtype."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from accel_bigmodel.dtypes import parse_dtype

if TYPE_CHECKING:
    from accel_bigmodel.align_hooks import AlignDevicesHook


def set_module_tensor_to_device(
    module: nn.Module,
    tensor_name: str,
    device: int | str | torch.device,
    value: torch.Tensor | None = None,
    dtype: str | torch.dtype | None = None,
    fp16_statistics: torch.Tensor | None = None,
    tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
) -> None:
    """Move the parameter or buffer ``tensor_name`` (dotted, from ``module``) to ``device``.

    With ``value`` the tensor is replaced by ``value`` (same shape). Floating-point values are cast
    to ``dtype`` if given, else to the dtype the tensor already has (as ``load_state_dict`` does).
    No data is copied when the value is already on ``device`` with the right dtype: a
    memory-mapped checkpoint tensor stays memory-mapped. ``fp16_statistics`` (bitsandbytes) is
    not supported. ``tied_params_map`` is accepted for compatibility and not used.
    """
    if fp16_statistics is not None:
        raise NotImplementedError("fp16_statistics (bitsandbytes 8-bit weights) is not supported")
    if "." in tensor_name:
        owner_name, _, tensor_name = tensor_name.rpartition(".")
        try:
            module = module.get_submodule(owner_name)
        except AttributeError:
            raise ValueError(
                f"{module.__class__.__name__} has no submodule {owner_name!r}"
            ) from None
    is_buffer = tensor_name in module._buffers
    if tensor_name not in module._parameters and not is_buffer:
        raise ValueError(
            f"{module.__class__.__name__} has no parameter or buffer named {tensor_name!r}; it "
            f"has {sorted([*module._parameters, *module._buffers])}"
        )
    old = module._buffers[tensor_name] if is_buffer else module._parameters[tensor_name]
    if old is None and value is None:
        return
    if value is None:
        if old.device.type == "meta" and torch.device(device).type != "meta":
            raise ValueError(
                f"{tensor_name!r} is on the meta device and has no data: pass a value to put it "
                f"on {device!r}"
            )
        new = old.to(device)
    else:
        if old is not None and old.shape != value.shape:
            raise ValueError(  # Accelerate's words first
                f'Trying to set a tensor of shape {value.shape} in "{tensor_name}" (which has '
                f"shape {old.shape}), this looks incorrect: the module expects "
                f"{tuple(old.shape)}; check that the checkpoint matches the model's configuration"
            )
        target = parse_dtype(dtype)
        if value.is_floating_point():
            if target is None and old is not None and old.is_floating_point():
                target = old.dtype
            if target is not None and value.dtype != target:
                value = value.to(target)
        new = value.to(device)
    if new is old:
        return
    if is_buffer:
        module._buffers[tensor_name] = new
        return
    requires_grad = old.requires_grad if old is not None else False
    param_cls = type(old) if old is not None else nn.Parameter
    if param_cls is nn.Parameter or not issubclass(param_cls, nn.Parameter):
        module._parameters[tensor_name] = nn.Parameter(
            new, requires_grad=requires_grad and new.is_floating_point()
        )
    else:
        extra = {k: v for k, v in old.__dict__.items() if k != "_is_hf_initialized"}
        module._parameters[tensor_name] = param_cls(new, requires_grad=requires_grad, **extra)


def _offloading_hook(module: nn.Module) -> AlignDevicesHook | None:
    """The hook keeping ``module``'s weights offloaded, also when it is one of a
    ``SequentialHook`` (as on a ``cpu_offload``-ed model's root); None if there is none."""
    return offloading_hook_among(getattr(module, "_hf_hook", None))


def offloading_hook_among(hook: object) -> AlignDevicesHook | None:
    """The first offloading ``AlignDevicesHook`` that ``hook`` is or holds (a ``SequentialHook``'s
    hooks, nested ones included, in order); None if there is none."""
    from accel_bigmodel.align_hooks import AlignDevicesHook
    from accel_bigmodel.hooks import SequentialHook

    hooks = [hook]
    while hooks:
        hook = hooks.pop(0)
        if isinstance(hook, SequentialHook):
            hooks[0:0] = hook.hooks
        elif isinstance(hook, AlignDevicesHook) and hook.offload:
            return hook
    return None


def has_offloaded_params(module: nn.Module) -> bool:
    """Whether ``module`` has a hook that keeps its weights offloaded between forward passes
    (an offloading ``AlignDevicesHook``, alone or within a ``SequentialHook``)."""
    return _offloading_hook(module) is not None


@contextlib.contextmanager
def align_module_device(
    module: nn.Module, execution_device: torch.device | str | int | None = None
) -> Iterator[None]:
    """Within this context, the module's own tensors are on ``execution_device`` (or onloaded).

    For a module with offloaded weights, the weights are brought in as for a forward pass and
    offloaded again on exit. Otherwise, with ``execution_device`` the tensors are moved there and
    moved back on exit.
    """
    hook = _offloading_hook(module)
    if hook is not None:
        saved = hook.execution_device
        if execution_device is not None:
            hook.execution_device = execution_device
        try:
            hook.pre_forward(module)
            yield
        finally:
            hook.post_forward(module, None)
            hook.execution_device = saved
    elif execution_device is not None:
        devices = {n: t.device for n, t in module.named_parameters(recurse=False)}
        try:
            for name in devices:
                set_module_tensor_to_device(module, name, execution_device)
            yield
        finally:
            for name, device in devices.items():
                set_module_tensor_to_device(module, name, device)
    else:
        yield
