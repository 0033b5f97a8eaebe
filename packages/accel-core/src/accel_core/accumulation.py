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
    from accel_core.accelerator import Accelerator


def advance(accelerator: Accelerator) -> None:
    """Count one batch and set ``sync_gradients`` for it."""
    state = accelerator.gradient_state
    if state.sync_with_dataloader and state.end_of_dataloader:
        accelerator.step = 0
        state._set_sync_gradients(True)
        return
    accelerator.step += 1
    state._set_sync_gradients(accelerator.step % state.num_steps == 0)


def no_sync(accelerator: Accelerator, model: Any) -> contextlib.AbstractContextManager[Any]:
    """The strategy's no-sync context for ``model`` (a null context if it has none)."""
    strategy = accelerator.strategy
    if accelerator.use_distributed and isinstance(strategy, SupportsNoSync):
        return strategy.no_sync(model)
    return contextlib.nullcontext()


@contextlib.contextmanager
def accumulate(accelerator: Accelerator, models: tuple[Any, ...]) -> Iterator[None]:
    """Count the batch, then run the block without gradient sync unless this batch syncs."""
    advance(accelerator)
    state = accelerator.gradient_state
    if state.sync_gradients or state.sync_each_batch or not models:
        yield
        return
    with contextlib.ExitStack() as stack:
        for model in models:
            stack.enter_context(no_sync(accelerator, model))
        yield
