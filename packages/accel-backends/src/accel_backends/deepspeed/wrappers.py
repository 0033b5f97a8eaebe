"""The wrappers around a live DeepSpeed engine, its optimizer and scheduler, and the plugin lookup.

The engine owns backward, accumulation, clipping, the optimizer step and the scheduler step, so
the optimizer and scheduler wrappers turn ``step`` and ``zero_grad`` into no-ops and
``accelerator.backward(loss)`` drives the engine (:meth:`DeepSpeedEngineWrapper.backward`). All
three need DeepSpeed installed (``pip install 'accel-backends[deepspeed]'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from accel_backends.deepspeed.plugin import DeepSpeedPlugin
from accel_backends.errors import require_engine
from accel_core import AcceleratedOptimizer, AcceleratedScheduler
from accel_ops import DistributedType


class DeepSpeedEngine(Protocol):
    """What the wrapper uses of ``deepspeed.runtime.engine.DeepSpeedEngine``."""

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None: ...
    def backward(self, loss: torch.Tensor, **kwargs: object) -> None: ...
    def step(self) -> None: ...
    def get_global_grad_norm(self) -> float | torch.Tensor | None: ...


class DeepSpeedEngineWrapper:
    """Drives a DeepSpeed engine from ``accelerator.backward(loss)``.

    Raises ``EngineNotInstalledError`` when DeepSpeed is not installed.
    """

    def __init__(self, engine: DeepSpeedEngine) -> None:
        require_engine("deepspeed", "DeepSpeedEngineWrapper")
        self.engine = engine

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: object) -> None:
        """Backward through the engine; at an accumulation boundary (``sync_gradients``) also
        the engine's step (clipping, optimizer step, zero grad, scheduler step)."""
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    def get_global_grad_norm(self) -> float | None:
        """The engine's gradient norm of the last step, as a number."""
        norm = self.engine.get_global_grad_norm()
        return norm.item() if isinstance(norm, torch.Tensor) else norm


class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """The engine's optimizer; ``step`` and ``zero_grad`` are the engine's, so no-ops here.

    Raises ``EngineNotInstalledError`` when DeepSpeed is not installed.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        require_engine("deepspeed", "DeepSpeedOptimizerWrapper")
        super().__init__(optimizer, device_placement=False, scaler=None)
        self._has_overflow = hasattr(self.optimizer, "overflow")

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Nothing: the engine zeroes gradients in its step."""

    def step(self, closure: object = None) -> None:
        """Nothing: ``accelerator.backward`` runs the engine's step."""

    @property
    def step_was_skipped(self) -> bool:
        """Whether the engine skipped the last step (fp16 overflow)."""
        return bool(self.optimizer.overflow) if self._has_overflow else False


class DeepSpeedSchedulerWrapper(AcceleratedScheduler):
    """The engine's scheduler; ``step`` is the engine's, so a no-op here.

    Raises ``EngineNotInstalledError`` when DeepSpeed is not installed.
    """

    def __init__(
        self,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    ) -> None:
        require_engine("deepspeed", "DeepSpeedSchedulerWrapper")
        super().__init__(scheduler, optimizers)

    def step(self, *args: object, **kwargs: object) -> None:
        """Nothing: ``accelerator.backward`` runs the engine's step."""


class _StateWithDeepSpeed(Protocol):
    @property
    def distributed_type(self) -> DistributedType: ...
    @property
    def deepspeed_plugins(self) -> DeepSpeedPlugin | Mapping[str, DeepSpeedPlugin] | None: ...


def get_active_deepspeed_plugin(state: _StateWithDeepSpeed) -> DeepSpeedPlugin:
    """The active :class:`DeepSpeedPlugin` of ``state`` (an ``AcceleratorState``).

    Raises:
        ValueError: when the run does not use DeepSpeed.
    """
    plugins = (
        state.deepspeed_plugins if state.distributed_type == DistributedType.DEEPSPEED else None
    )
    if plugins is None:
        raise ValueError(
            "Couldn't retrieve the active `DeepSpeedPlugin` as none were enabled. Please make "
            "sure that either `Accelerator` is configured for `deepspeed` or make sure that the "
            "desired `DeepSpeedPlugin` has been enabled "
            "(`AcceleratorState().select_deepspeed_plugin(name)`) before calling this function."
        )
    if isinstance(plugins, DeepSpeedPlugin):
        return plugins
    return next(plugin for plugin in plugins.values() if plugin.selected)
