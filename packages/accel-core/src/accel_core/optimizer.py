"""``AcceleratedOptimizer``: the optimizer ``prepare`` returns.

It behaves like the optimizer it wraps, except that ``step`` and ``zero_grad`` do nothing while
gradients are being accumulated (``GradientState.sync_gradients`` is False), and that with fp16
the step goes through the gradient scaler, which skips it when the gradients hold inf or NaN
(``step_was_skipped`` then reads True).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

_MISSING = object()

#: ``step_function(optimizer, closure) -> loss``: steps the inner optimizer.
StepFunction = Callable[[torch.optim.Optimizer, Callable[[], Any] | None], Any]


def _move_state(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _move_state(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_move_state(v, device) for v in value]
    return value


def _process_states(
    accelerator_state: AcceleratorState | None, gradient_state: GradientState | None
) -> tuple[AcceleratorState, GradientState]:
    """The states given, else this process's (a wrapper built without them, or unpickled)."""
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    return (
        accelerator_state if accelerator_state is not None else AcceleratorState(),
        gradient_state if gradient_state is not None else GradientState(),
    )


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer`` for accumulation, mixed precision and device placement.

    Args:
        optimizer: the optimizer to wrap.
        device_placement: move the optimizer's state (if any) to the Accelerator's device.
        scaler: the fp16 gradient scaler, or None.
        step_function: how the inner optimizer steps when there is no scaler,
            ``step_function(optimizer, closure)`` (the strategy's ``optimizer_step``); default
            ``optimizer.step(closure)``.
        accelerator_state, gradient_state: the process-wide states (its device, whether this
            step synchronises gradients), given by whoever wraps the optimizer (accel's strategies
            do); when not given, as in Accelerate's ``AcceleratedOptimizer(optimizer,
            device_placement, scaler)``, the process's current ones are used.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        device_placement: bool = True,
        scaler: torch.amp.GradScaler | None = None,
        *,
        step_function: StepFunction | None = None,
        accelerator_state: AcceleratorState | None = None,
        gradient_state: GradientState | None = None,
    ) -> None:
        # No super().__init__: this object forwards to the wrapped optimizer's own state.
        self.optimizer = optimizer
        self.scaler = scaler
        self.step_function = step_function
        self.accelerator_state, self.gradient_state = _process_states(
            accelerator_state, gradient_state
        )
        self.device_placement = device_placement
        self._is_overflow = False
        if device_placement and optimizer.state:
            state_dict = optimizer.state_dict()
            optimizer.load_state_dict(_move_state(state_dict, self.accelerator_state.device))

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, state: Any) -> None:
        self.optimizer.state = state

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, param_groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = param_groups

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, defaults: dict[str, Any]) -> None:
        self.optimizer.defaults = defaults

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.device_placement:
            state_dict = _move_state(state_dict, self.accelerator_state.device)
        self.optimizer.load_state_dict(state_dict)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Clear the gradients, unless they are being accumulated."""
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=True if set_to_none is None else set_to_none)

    def train(self) -> None:
        """Forward ``train()`` to optimizers that have one (schedule-free optimizers)."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        """Forward ``eval()`` to optimizers that have one (schedule-free optimizers)."""
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Step the optimizer when gradients are synchronised; skip it while accumulating."""
        if not self.gradient_state.sync_gradients:
            return None
        if self.scaler is None:
            self._is_overflow = False
            if self.step_function is not None:
                return self.step_function(self.optimizer, closure)
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        return self._scaled_step(self.scaler, closure)

    def _scaled_step(self, scaler: torch.amp.GradScaler, closure: Callable[[], Any] | None) -> Any:
        # The scaler calls optimizer.step only when the gradients are finite: watch for that call.
        called = False
        saved = self.optimizer.__dict__.get("step", _MISSING)
        original = self.optimizer.step

        def tracked_step(*args: Any, **kwargs: Any) -> Any:
            nonlocal called
            called = True
            return original(*args, **kwargs)

        self.optimizer.step = tracked_step  # type: ignore[method-assign]
        try:
            result = (
                scaler.step(self.optimizer, closure)
                if closure is not None
                else scaler.step(self.optimizer)
            )
            scaler.update()
        finally:
            if saved is _MISSING:
                del self.optimizer.step
            else:
                self.optimizer.step = saved  # type: ignore[method-assign]
        self._is_overflow = not called
        return result

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step`` was skipped because the gradients overflowed."""
        return self._is_overflow

    # torch.optim.Optimizer pickles only defaults, state and param_groups, which this wrapper
    # forwards: pickle the wrapper's own fields instead. The process-wide states are not copied
    # into the pickle; the unpickled wrapper joins those of the process that loads it (and steps
    # through that process's strategy, when it stepped through one).
    _PROCESS_STATES = ("accelerator_state", "gradient_state", "step_function")

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in self._PROCESS_STATES}
        state["_through_strategy"] = self.step_function is not None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        through_strategy = state.pop("_through_strategy", False)
        self.__dict__.update(state)
        self.accelerator_state, self.gradient_state = _process_states(None, None)
        strategy = getattr(self.accelerator_state, "strategy", None) if through_strategy else None
        self.step_function = strategy.optimizer_step if strategy is not None else None

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


def unwrap_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The torch optimizer inside any ``AcceleratedOptimizer`` wrappers (``optimizer`` if none)."""
    while isinstance(optimizer, AcceleratedOptimizer):
        optimizer = optimizer.optimizer
    return optimizer


def lomo_backward(
    optimizers: Sequence[Any], loss: torch.Tensor, learning_rate: float | None
) -> None:
    """Run ``fused_backward(loss, learning_rate)`` of every LOMO optimizer among ``optimizers``
    (prepared or not): ``lomo-optim``'s ``Lomo`` and ``AdaLomo`` compute the gradients and update
    the parameters in one pass.

    Raises ValueError without a learning rate, or when none of ``optimizers`` is a LOMO one.
    """
    if learning_rate is None:
        raise ValueError("lomo_backward needs the learning rate: backward(loss, learning_rate=lr).")
    called = False
    for optimizer in optimizers:
        inner = optimizer.optimizer if isinstance(optimizer, AcceleratedOptimizer) else optimizer
        fused = getattr(inner, "fused_backward", None)
        if callable(fused):
            fused(loss, learning_rate)
            called = True
    if not called:
        raise ValueError(
            "lomo_backward found no LOMO optimizer (Lomo, AdaLomo) among the prepared optimizers; "
            "pass it to accelerator.prepare() first."
        )
