"""Build any model on the meta device (or another) without allocating or initialising weights.

``init_empty_weights`` patches ``nn.Module.register_parameter`` so every new parameter is moved to
the meta device as soon as it is registered (with ``include_buffers=True`` it only enters torch's
``torch.device("meta")`` context instead, which places buffers too and patches nothing, as
Accelerate does on torch >= 2), and activates a
``TorchFunctionMode`` that turns weight-initialisation calls on meta tensors (``torch.nn.init.*``,
``Tensor.normal_``, ``uniform_``, ``fill_``, ...) into no-ops. Initialising a meta tensor computes
nothing, but torch routes it through its Python reference implementations, which costs about a
second for a 2 GB model; skipping it makes building a skeleton take milliseconds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from accel_ops import parse_flag_from_env

# Names of torch.nn.init functions and in-place Tensor methods used to initialise weights. Matched
# by name because libraries wrap or re-export the torch.nn.init functions (transformers does).
_INIT_NAMES = frozenset(
    {
        "uniform_",
        "normal_",
        "trunc_normal_",
        "constant_",
        "ones_",
        "zeros_",
        "eye_",
        "dirac_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "orthogonal_",
        "sparse_",
        "fill_",
        "zero_",
        "random_",
        "exponential_",
        "bernoulli_",
        "cauchy_",
        "log_normal_",
        "geometric_",
        "copy_",
        "clamp_",
        "mul_",
        "div_",
        "add_",
        "sub_",
    }
)


class _SkipMetaInit(TorchFunctionMode):
    """Return meta tensors unchanged from in-place initialisation calls, computing nothing."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in _INIT_NAMES:
            target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


#: Environment variables giving the default of ``include_buffers``, the first one set wins.
INCLUDE_BUFFERS_VARIABLES = ("ACCEL_INIT_INCLUDE_BUFFERS", "ACCELERATE_INIT_INCLUDE_BUFFERS")


def include_buffers_default() -> bool:
    """``include_buffers`` when not given: ``ACCEL_INIT_INCLUDE_BUFFERS``, else Accelerate's
    ``ACCELERATE_INIT_INCLUDE_BUFFERS`` (``1``/``true``/``yes``...), else False."""
    for key in INCLUDE_BUFFERS_VARIABLES:
        if key in os.environ:
            return parse_flag_from_env(key)
    return False


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Within this context, models are created with all their parameters on the meta device.

    Nothing is allocated for the weights and no initialisation runs, so any model, however large,
    is built in milliseconds. Buffers stay on the CPU (they often hold computed constants such as
    rotary frequencies) unless ``include_buffers=True``; when it is not given, the environment
    decides (``ACCEL_INIT_INCLUDE_BUFFERS``, else ``ACCELERATE_INIT_INCLUDE_BUFFERS``).

    Example::

        with init_empty_weights():
            model = nn.Sequential(*[nn.Linear(100_000, 100_000) for _ in range(1000)])
    """
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


@contextlib.contextmanager
def init_on_device(
    device: torch.device | str | int, include_buffers: bool | None = None
) -> Iterator[None]:
    """Within this context, new parameters (and buffers if ``include_buffers``) go to ``device``.

    With ``include_buffers=True`` tensor constructors called without a device (``torch.empty``,
    ``torch.zeros``, ...) also default to ``device``; when it is not given, the environment
    decides, as for ``init_empty_weights``. On the meta device, weight initialisation is
    skipped (see the module docstring).
    """
    device = torch.device(device)
    if include_buffers is None:
        include_buffers = include_buffers_default()
    if include_buffers:
        # torch's device context places every new parameter and buffer, in this thread only:
        # nothing of nn.Module is patched (other threads and libraries see no change)
        with contextlib.ExitStack() as stack:
            stack.enter_context(device)
            if device.type == "meta":
                stack.enter_context(_SkipMetaInit())
            yield
        return
    original_register_parameter = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original_register_parameter(module, name, param)
        if param is not None and param.device != device:
            kwargs = dict(module._parameters[name].__dict__)
            kwargs["requires_grad"] = param.requires_grad
            param_cls = type(module._parameters[name])
            moved = param.to(device)
            if param_cls is nn.Parameter:
                module._parameters[name] = nn.Parameter(moved, requires_grad=param.requires_grad)
            else:
                module._parameters[name] = param_cls(moved, **kwargs)

    with contextlib.ExitStack() as stack:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        try:
            if device.type == "meta":
                stack.enter_context(_SkipMetaInit())
            yield
        finally:
            nn.Module.register_parameter = original_register_parameter  # type: ignore[method-assign]
