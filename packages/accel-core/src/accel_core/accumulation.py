"""Gradient accumulation: when a step synchronises gradients, and skipping synchronisation.

``Accelerator.accumulate(model)`` counts batches. Every ``num_steps``-th batch (and the last
batch of a data loader, with ``sync_with_dataloader``) sets ``sync_gradients``; the others run
inside the strategy's no-sync context, so DDP does not average gradients that will keep
accumulating, and the prepared optimizer and scheduler skip their steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accel_core.strategies.base import SupportsNoSync

if TYPE_CHECKING:
    from accel_core.gradient_state import GradientState
    from accel_core.strategies import Strategy


class Accumulation:
    """The batch counter of one ``Accelerator`` (``accelerator.step``) and its contexts.

    Args:
        gradient_state: the process-wide ``GradientState`` whose ``sync_gradients`` it sets.
        strategy: the strategy whose no-sync context skips gradient synchronisation.
        use_distributed: whether more than one process takes part (else there is nothing to
            skip).

    Attributes:
        step: batches counted by ``accumulate`` since the last reset (0 after a batch that ended
            a data loader with ``sync_with_dataloader``); saved and restored by checkpoints.
    """

    def __init__(
        self, gradient_state: GradientState, strategy: Strategy, use_distributed: bool
    ) -> None:
        self.gradient_state = gradient_state
        self.strategy = strategy
        self.use_distributed = use_distributed
        self.step = 0

    def advance(self) -> None:
        """Count one batch and set ``sync_gradients`` for it."""
        state = self.gradient_state
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.step = 0
            state._set_sync_gradients(True)
            return
        self.step += 1
        state._set_sync_gradients(self.step % state.num_steps == 0)

    def no_sync(self, model: Any) -> contextlib.AbstractContextManager[Any]:
        """The strategy's no-sync context for ``model`` (a null context if it has none)."""
        if self.use_distributed and isinstance(self.strategy, SupportsNoSync):
            return self.strategy.no_sync(model)
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def accumulate(self, models: tuple[Any, ...]) -> Iterator[None]:
        """Count the batch, then run the block without gradient sync unless this batch syncs."""
        self.advance()
        state = self.gradient_state
        if state.sync_gradients or state.sync_each_batch or not models:
            yield
            return
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(self.no_sync(model))
            yield

    def in_cycle(self) -> bool:
        """Whether the count stands inside an accumulation cycle (a checkpoint then keeps the
        gradients accumulated so far)."""
        steps = self.gradient_state.num_steps
        return steps > 1 and self.step % steps != 0
