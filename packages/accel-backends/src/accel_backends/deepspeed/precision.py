"""The precision the Accelerator reports under the deepspeed strategy.

DeepSpeed's ``bf16``/``fp16`` sections make the engine cast the model's weights (keeping fp32
master weights in its optimizer) and scale the loss itself, so nothing runs under autocast and
there is no torch gradient scaler, as in Hugging Face Accelerate 1.15. The mode reported is the one
the DeepSpeed config enables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from accel_core.precision import Precision

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import AutocastKwargs


class DeepSpeedPrecision(Precision):
    """The precision the Accelerator reports under DeepSpeed: no autocast and no scaler, since the
    engine keeps bf16/fp16 weights (fp32 master weights in its optimizer) and scales the loss."""

    def __init__(self, mode: str, device: torch.device) -> None:
        super().__init__(mode, device)
        self.scaler = None

    @property
    def native_amp(self) -> bool:
        """Always False: the engine casts the model, nothing runs under autocast."""
        return False

    def autocast(
        self, autocast_handler: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """A null context (Accelerate's ``accelerator.autocast()`` under DeepSpeed)."""
        return contextlib.nullcontext()


def configured_mode(config: Mapping[str, Any]) -> str:
    """``"fp16"``, ``"bf16"`` or ``"no"``: what the DeepSpeed config's sections enable."""
    return next((dtype for dtype in ("fp16", "bf16") if _enabled(config, dtype)), "no")


def _enabled(config: Mapping[str, Any], dtype: str) -> bool:
    section = config.get(dtype)
    return isinstance(section, Mapping) and str(section.get("enabled", False)).lower() == "true"
