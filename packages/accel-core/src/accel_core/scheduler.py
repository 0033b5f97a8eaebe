"""``AcceleratedScheduler``: the learning-rate scheduler ``prepare`` returns.

Following Hugging Face Accelerate, a prepared scheduler advances ``num_processes`` times per
optimizer step when each process takes whole batches (the schedule was written for the
single-process loop, whose loader is ``num_processes`` times longer), and once when batches are
split. It does not advance while gradients are accumulated, nor when the optimizer step was skipped
by the fp16 gradient scaler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel_core.gradient_state import GradientState


class AcceleratedScheduler:
    """Wrap ``scheduler`` so that it follows the prepared optimizers.

    Args:
        scheduler: the learning-rate scheduler.
        optimizers: the prepared optimizer(s) it schedules.
        step_with_optimizer: advance only with real optimizer steps (False: every call steps).
        split_batches: batches are split between processes (step once instead of
            ``num_processes`` times).
        num_processes, gradient_state: the number of processes and the process-wide
            ``GradientState``, given by whoever wraps the scheduler (``prepare`` does); when not
            given, as in Accelerate's signature, they are read from the process's current states.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Any,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
        *,
        num_processes: int | None = None,
        gradient_state: GradientState | None = None,
    ) -> None:
        from accel_core.gradient_state import GradientState
        from accel_core.state import AcceleratorState

        self.scheduler = scheduler
        self.optimizers: Sequence[Any] = (
            optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
        )
        self.split_batches = split_batches
        self.step_with_optimizer = step_with_optimizer
        self.gradient_state = gradient_state if gradient_state is not None else GradientState()
        self._num_processes = (
            num_processes if num_processes is not None else AcceleratorState().num_processes
        )

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance the schedule as described in the class docstring."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler:
                # Keep torch's "scheduler stepped before optimizer" bookkeeping quiet.
                self.scheduler._step_count += 1
            return
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        steps = 1 if self.split_batches else self._num_processes
        total = getattr(self.scheduler, "total_steps", None)
        for _ in range(steps):
            # OneCycleLR raises past its last step; stop there instead.
            if total is not None and self.scheduler._step_count > total:
                break
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> list[float]:
        return self.scheduler.get_lr()

    def print_lr(self, *args: Any, **kwargs: Any) -> None:
        self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Anything else (last_epoch, base_lrs...) comes from the wrapped scheduler.
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
