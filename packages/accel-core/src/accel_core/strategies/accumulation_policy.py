"""The accumulation part of a strategy: who divides the loss, the engine's own accumulation
options, and the gradients a checkpoint keeps when it falls inside an accumulation cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_core.gradient_state import GradientAccumulationPlugin
    from accel_core.strategies.base import Strategy


class AccumulationPolicy:
    """How a strategy accumulates gradients (default: the Accelerator divides the loss and
    skips synchronisation; gradients live in each parameter's ``.grad``)."""

    #: True for engines that accumulate themselves and divide the loss by the accumulation steps
    #: (DeepSpeed): the Accelerator then passes the loss undivided to ``backward``.
    owned_by_engine: ClassVar[bool] = False

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def configure(self, plugin: GradientAccumulationPlugin) -> GradientAccumulationPlugin:
        """The accumulation options ``GradientState`` is created from (default: ``plugin``);
        called once, before that state exists, so an engine's own config can win."""
        return plugin

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The gradients ``model`` holds inside an accumulation cycle, by parameter name, as
        this process saves them when a checkpoint falls mid-cycle (default: each parameter's
        ``.grad``). An engine that keeps them elsewhere (FSDP2's unsharded accumulation
        buffers) returns those."""
        return {
            name: parameter.grad
            for name, parameter in extract_model_from_parallel(model).named_parameters()
            if parameter.grad is not None
        }

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Put back what :meth:`accumulated_gradients` returned (``None``: the checkpoint was at
        the end of a cycle, so no gradient is kept)."""
        for name, parameter in extract_model_from_parallel(model).named_parameters():
            if gradients is None or name not in gradients:
                parameter.grad = None
            else:
                parameter.grad = gradients[name].to(parameter.device, parameter.dtype)


__all__ = ["AccumulationPolicy"]
