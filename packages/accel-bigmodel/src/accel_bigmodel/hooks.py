"""Hooks around a module's forward: ``ModelHook`` and attaching or removing it.

``add_hook_to_module`` replaces ``module.forward`` by a wrapper that calls, in this order,
``hook.pre_forward(module, *args, **kwargs)`` (which returns the new args and kwargs), the
original forward (kept as ``module._old_forward``), then ``hook.post_forward(module, output)``.
``hook.init_hook(module)`` runs once when attached, ``hook.detach_hook(module)`` when removed.
The hook is kept as ``module._hf_hook``, the attribute other libraries (transformers, peft,
diffusers) look for.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn


class ModelHook:
    """Callbacks run around the forward of the module it is attached to. Subclass and override.

    ``no_grad = True`` runs the wrapped forward under ``torch.no_grad()``.
    """

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is attached; returns the module (possibly modified)."""
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        """Called before the forward with its inputs; returns the inputs to use."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Called after the forward with its output; returns the output to give back."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; returns the module."""
        return module

    def offloads_weights(self) -> bool:
        """Whether this hook keeps its module's weights offloaded between forward passes: it is,
        or (a ``SequentialHook``) holds, an ``AlignDevicesHook`` with ``offload=True``.

        With :meth:`offloaded_model_state_dict`, what accel-core's ``save_model`` asks of a
        module's hook (``accel_core.offloaded_weights.OffloadingHook``), so that it saves such a
        model's full weights without importing accel-bigmodel.
        """
        from accel_bigmodel.tensors import offloading_hook_among

        return offloading_hook_among(self) is not None

    def offloaded_model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict of ``model``, a model holding this hook's module, offloaded weights
        included (:func:`~accel_bigmodel.get_state_dict_offloaded_model`)."""
        from accel_bigmodel.offloaded_state import get_state_dict_offloaded_model

        return get_state_dict_offloaded_model(model)


class SequentialHook(ModelHook):
    """Several hooks run as one: pre_forward in order, post_forward in order too."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = list(hooks)

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Attach ``hook`` to ``module`` and return the module.

    A hook already attached is replaced, or with ``append=True`` kept and run first (both become
    a ``SequentialHook``).
    """
    if append and getattr(module, "_hf_hook", None) is not None:
        previous = module._hf_hook
        remove_hook_from_module(module)
        hook = SequentialHook(previous, hook)
    if hasattr(module, "_hf_hook") and hasattr(module, "_old_forward"):
        original = module._old_forward  # replace the hook, keep the true original forward
    else:
        original = module.forward
        module._old_forward = original
    module = hook.init_hook(module)
    module._hf_hook = hook

    def forward(*args: Any, **kwargs: Any) -> Any:
        active = module._hf_hook
        args, kwargs = active.pre_forward(module, *args, **kwargs)
        if active.no_grad:
            with torch.no_grad():
                output = module._old_forward(*args, **kwargs)
        else:
            output = module._old_forward(*args, **kwargs)
        return active.post_forward(module, output)

    # A closure, not a bound method: ``module.forward`` keeps the original's name and signature.
    module.forward = functools.update_wrapper(forward, original)
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Detach the hook of ``module`` (and of all submodules with ``recurse``); restore forward."""
    hook = getattr(module, "_hf_hook", None)
    if hook is not None:
        hook.detach_hook(module)
        del module._hf_hook
    if hasattr(module, "_old_forward"):
        original = module._old_forward
        del module._old_forward
        bound_class_forward = (
            getattr(original, "__self__", None) is module
            and getattr(original, "__func__", None) is type(module).forward
        )
        if bound_class_forward:
            module.__dict__.pop("forward", None)
        else:
            module.forward = original
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Remove the hooks of every submodule of ``module`` (not of ``module`` itself)."""
    for child in module.children():
        remove_hook_from_module(child, recurse=True)
