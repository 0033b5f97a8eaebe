"""Mixed precision: which autocast context to use, the gradient scaler, and model forward wrapping.

``"bf16"`` runs the forward pass under ``torch.autocast(dtype=torch.bfloat16)`` (on CPU too) and
needs no scaler. ``"fp16"`` runs it under ``torch.autocast(dtype=torch.float16)`` and scales the
loss with a ``torch.amp.GradScaler`` so small gradients do not underflow; it needs an accelerator
(CUDA). ``"no"`` changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from accel_base.env_values import MIXED_PRECISION_CHOICES

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs
    from accel_ops import DistributedType

#: Makes the fp16 scaler: ``factory(device_type, **GradScalerKwargs) -> GradScaler``.
ScalerFactory = Callable[..., torch.amp.GradScaler]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check_mixed_precision(value: object, device: torch.device) -> str:
    """Validate a ``mixed_precision`` value for ``device`` and return it as a lower-case string."""
    text = str(getattr(value, "value", value)).lower() if value is not None else "no"
    if text not in MIXED_PRECISION_CHOICES:
        raise ValueError(
            f"mixed_precision={value!r} is not supported; choose one of "
            f"{', '.join(map(repr, MIXED_PRECISION_CHOICES))} (fp8 is out of scope)."
        )
    return text


def runs_in_full_precision(mixed_precision: str, device_type: str) -> bool:
    """Whether ``mixed_precision`` computes in fp32 on ``device_type``: ``"no"``, and ``"fp16"``
    on a CPU, which Accelerate runs without autocast or scaler (a CPU smoke test of a GPU
    config); :class:`Precision` warns about the latter once."""
    return mixed_precision not in _DTYPES or (mixed_precision == "fp16" and device_type == "cpu")


def autocast_context(
    mixed_precision: str, device_type: str, autocast_kwargs: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """The autocast context for a precision mode on a device type (a null context for ``"no"``,
    and for ``"fp16"`` on a CPU, as in Accelerate)."""
    if runs_in_full_precision(mixed_precision, device_type):
        return contextlib.nullcontext()
    return torch.autocast(
        device_type=device_type, dtype=_DTYPES[mixed_precision], **(autocast_kwargs or {})
    )


def get_mixed_precision_context_manager(
    native_amp: bool = False, autocast_kwargs: AutocastKwargs | None = None
) -> contextlib.AbstractContextManager[Any]:
    """The current ``AcceleratorState``'s autocast context (null unless ``native_amp``)."""
    if not native_amp:
        return contextlib.nullcontext()
    from accel_core.state import AcceleratorState

    state = AcceleratorState()
    kwargs = autocast_kwargs.to_kwargs() if autocast_kwargs is not None else {}
    return autocast_context(state.mixed_precision, state.device.type, kwargs)


def get_grad_scaler(
    distributed_type: DistributedType | None = None, device_type: str = "cuda", **kwargs: Any
) -> torch.amp.GradScaler:
    """A gradient scaler for fp16 training, as the running strategy makes it.

    torch's ``GradScaler``; a strategy that needs another scaler (FSDP's sharded one) builds it
    into the :class:`Precision` its ``setup_precision`` returns (``accelerator.scaler``).
    ``distributed_type`` is accepted for Accelerate's signature.
    """
    return torch.amp.GradScaler(device_type, **kwargs)


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, dict):
        return type(value)((k, _to_fp32(v)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_to_fp32(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to_fp32(v) for v in value)
    return value


class Precision:
    """The precision a strategy owns: autocast context, fp16 gradient scaler, loss scaling.

    ``Strategy.setup_precision`` builds it (``scaler_factory`` makes the fp16 scaler: torch's
    ``GradScaler`` unless the strategy passes another); the Accelerator reads ``mode``,
    ``scaler`` and ``autocast`` from it.
    An engine that scales its loss itself builds a subclass whose ``scaler`` stays None.
    """

    def __init__(
        self,
        mixed_precision: str,
        device: torch.device,
        autocast_handler: AutocastKwargs | None = None,
        scaler_handler: GradScalerKwargs | None = None,
        scaler_factory: ScalerFactory | None = None,
    ) -> None:
        self.mode = check_mixed_precision(mixed_precision, device)
        self.device_type = device.type
        self.autocast_handler = autocast_handler
        self.scaler: torch.amp.GradScaler | None = None
        if self.mode == "fp16" and device.type == "cpu":
            warnings.warn(
                "mixed_precision='fp16' on CPU: fp16 training needs a GPU (its gradient scaler "
                "is CUDA's), so this run computes in full precision (fp32) without a scaler, as "
                "Accelerate does. For mixed precision on CPU use mixed_precision='bf16'.",
                UserWarning,
                stacklevel=2,
            )
        elif self.mode == "fp16":
            scaler_kwargs = scaler_handler.to_kwargs() if scaler_handler is not None else {}
            factory = scaler_factory or torch.amp.GradScaler
            self.scaler = factory(self.device_type, **scaler_kwargs)

    @property
    def native_amp(self) -> bool:
        """Whether autocast is on (bf16, or fp16 on an accelerator)."""
        return not runs_in_full_precision(self.mode, self.device_type)

    def autocast(
        self, autocast_handler: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """The autocast context, with ``autocast_handler`` overriding the Accelerator's."""
        handler = autocast_handler if autocast_handler is not None else self.autocast_handler
        kwargs = handler.to_kwargs() if handler is not None else {}
        return autocast_context(self.mode, self.device_type, kwargs)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss multiplied by the scaler's factor (unchanged without a scaler)."""
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``scale_loss(loss).backward(**kwargs)``."""
        self.scale_loss(loss).backward(**kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the loss scale (nothing without a scaler)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def wrap_forward(self, model: torch.nn.Module) -> None:
        """Run ``model.forward`` under autocast and return its outputs in fp32.

        The original is kept as ``model._original_forward`` (``unwrap_model`` restores it).
        """
        if not self.native_amp or hasattr(model, "_original_forward"):
            return
        original: Callable[..., Any] = model.forward
        context = self.autocast

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with context():
                outputs = original(*args, **kwargs)
            return _to_fp32(outputs)

        model._original_forward = original  # type: ignore[assignment]
        model.forward = forward  # type: ignore[method-assign]
