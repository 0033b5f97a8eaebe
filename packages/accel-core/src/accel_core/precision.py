"""Mixed precision: which autocast context to use, the gradient scaler, and model forward wrapping.

``"bf16"`` runs the forward pass under ``torch.autocast(dtype=torch.bfloat16)`` (on CPU too) and
needs no scaler. ``"fp16"`` runs it under ``torch.autocast(dtype=torch.float16)`` and scales the
loss with a ``torch.amp.GradScaler`` so small gradients do not underflow; it needs an accelerator
(CUDA). ``"no"`` changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs

MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check_mixed_precision(value: object, device: torch.device) -> str:
    """Validate a ``mixed_precision`` value for ``device`` and return it as a lower-case string."""
    text = str(getattr(value, "value", value)).lower() if value is not None else "no"
    if text not in MIXED_PRECISION_CHOICES:
        raise ValueError(
            f"mixed_precision={value!r} is not supported; choose one of "
            f"{', '.join(map(repr, MIXED_PRECISION_CHOICES))} (fp8 is out of scope)."
        )
    if text == "fp16" and device.type == "cpu":
        raise ValueError(
            "mixed_precision='fp16' needs a GPU: fp16 training scales the loss with a CUDA "
            f"gradient scaler, and this process runs on {device}. Use mixed_precision='bf16' "
            "on CPU, or mixed_precision='no'."
        )
    return text


def autocast_context(
    mixed_precision: str, device_type: str, autocast_kwargs: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """The autocast context for a precision mode on a device type (a null context for ``"no"``)."""
    if mixed_precision not in _DTYPES:
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
    distributed_type: object = None, device_type: str = "cuda", **kwargs: Any
) -> torch.amp.GradScaler:
    """A gradient scaler for fp16 training (FSDP gets torch's sharded scaler)."""
    if str(getattr(distributed_type, "value", distributed_type)) == "FSDP":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device_type, **kwargs)
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
    """The precision of one Accelerator: its autocast context and, for fp16, its gradient scaler."""

    def __init__(
        self,
        mixed_precision: str,
        device: torch.device,
        autocast_handler: AutocastKwargs | None = None,
        scaler_handler: GradScalerKwargs | None = None,
        distributed_type: object = None,
    ) -> None:
        self.mode = check_mixed_precision(mixed_precision, device)
        self.device_type = device.type
        self.autocast_handler = autocast_handler
        self.scaler: torch.amp.GradScaler | None = None
        if self.mode == "fp16":
            scaler_kwargs = scaler_handler.to_kwargs() if scaler_handler is not None else {}
            self.scaler = get_grad_scaler(distributed_type, self.device_type, **scaler_kwargs)

    @property
    def native_amp(self) -> bool:
        """Whether autocast is on (fp16 or bf16)."""
        return self.mode in _DTYPES

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
