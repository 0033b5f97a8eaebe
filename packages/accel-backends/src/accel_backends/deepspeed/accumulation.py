"""DeepSpeed's accumulation policy: the engine accumulates, divides the loss by its own
``gradient_accumulation_steps`` and keeps the cycle's gradients in its partitioned buffers."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import TYPE_CHECKING, ClassVar

import torch

from accel_backends.deepspeed.sources import DeepSpeedConfigConflict, Disagreement, Sourced
from accel_core.strategies.accumulation_policy import AccumulationPolicy

if TYPE_CHECKING:
    from accel_backends.deepspeed.plugin import DeepSpeedPlugin
    from accel_backends.deepspeed.strategy import DeepSpeedStrategy
    from accel_core.gradient_state import GradientAccumulationPlugin

logger = logging.getLogger("accel_backends.deepspeed")


class DeepSpeedAccumulation(AccumulationPolicy):
    """The engine owns accumulation: the Accelerator passes the loss undivided."""

    #: The engine divides the loss by its accumulation steps itself.
    owned_by_engine: ClassVar[bool] = True
    strategy: DeepSpeedStrategy

    def configure(self, plugin: GradientAccumulationPlugin) -> GradientAccumulationPlugin:
        """Reconcile the Accelerator's accumulation steps with the config's: ``"auto"`` takes the
        Accelerator's; a number in the config wins over the Accelerator's default of 1 (as in
        Accelerate); two different numbers >1 are a :class:`DeepSpeedConfigConflict`. The
        active plugin decides; the others take the same rule (their ``"auto"`` is filled)."""
        steps = plugin.num_steps or 1
        for other in self.strategy._all_plugins():
            if other is not self.strategy.plugin:
                reconcile_accumulation(other, steps)
        configured = reconcile_accumulation(self.strategy.plugin, steps)
        if configured == steps:
            return plugin
        logger.info("gradient accumulation: %s steps, from the DeepSpeed config", configured)
        return dataclasses.replace(plugin, num_steps=configured)

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Nothing: the engine keeps the cycle's gradients in its own partitioned buffers, and
        neither its checkpoint nor accel's can save them. Warns, since a run resumed from this
        checkpoint continues without the micro-batches of the unfinished cycle (as under
        Accelerate); saving at the end of a cycle (every ``gradient_accumulation_steps``
        batches) resumes exactly."""
        warnings.warn(
            "save_state inside a gradient accumulation cycle under DeepSpeed: the engine does not "
            "save the gradients accumulated so far, so a run resumed from this checkpoint "
            "continues without them. Save at the end of a cycle to resume exactly.",
            stacklevel=2,
        )
        return {}

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Nothing to restore (see :meth:`accumulated_gradients`); the engine's own state came
        back with its checkpoint."""


def reconcile_accumulation(plugin: DeepSpeedPlugin, steps: int) -> int:
    """Fill ``plugin``'s ``"auto"`` accumulation steps with the Accelerator's ``steps``, or check
    its number against them (see ``DeepSpeedAccumulation.configure``); returns the
    number the plugin now holds."""
    key = "gradient_accumulation_steps"
    given = Sourced(steps, f"Accelerator(gradient_accumulation_steps={steps})")
    configured = plugin.get_value(key)
    if configured in (None, "auto"):
        plugin.resolved_config.fill({key: given})
        return steps
    if configured != steps and steps != 1:
        known = plugin.resolved_config.current().get(key)
        first = known if known is not None else Sourced(configured, "the DeepSpeed config")
        raise DeepSpeedConfigConflict([Disagreement(key, first, given)])
    return int(configured)


__all__ = ["DeepSpeedAccumulation"]
