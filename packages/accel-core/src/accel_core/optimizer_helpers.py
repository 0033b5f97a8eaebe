"""The two module-level helpers of Accelerate's ``accelerate.optimizer``.

:func:`move_to_device` moves an optimizer state dict (or any nest of containers) to a device;
:func:`patch_optimizer_step` wraps an optimizer's ``step`` so that a call to it is recorded on the
prepared optimizer as ``_accelerate_step_called`` (how a caller learns whether a gradient scaler
really stepped, or skipped the step for inf/NaN gradients).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch

from accel_ops import honor_type

_State = TypeVar("_State")
_Result = TypeVar("_Result")


def move_to_device(state: _State, device: torch.device | str | int) -> _State:
    """``state`` with every tensor moved to ``device``.

    Lists, tuples (namedtuples included) and dicts (of their own type) are rebuilt around the
    moved tensors; anything else is returned as it is.
    """
    if isinstance(state, (list, tuple)):
        return honor_type(state, (move_to_device(item, device) for item in state))  # type: ignore[no-any-return]
    if isinstance(state, dict):
        return type(state)({key: move_to_device(value, device) for key, value in state.items()})  # type: ignore[return-value]
    if isinstance(state, torch.Tensor):
        return state.to(device)  # type: ignore[return-value]
    return state


class StepRecorder(Protocol):
    """An object that records whether its optimizer's ``step`` was called."""

    _accelerate_step_called: bool


def patch_optimizer_step(
    accelerated_optimizer: StepRecorder, method: Callable[..., _Result]
) -> Callable[..., _Result]:
    """``method`` (an optimizer's ``step``) wrapped to set
    ``accelerated_optimizer._accelerate_step_called = True`` before each call."""

    def patched_step(*args: Any, **kwargs: Any) -> _Result:
        accelerated_optimizer._accelerate_step_called = True
        return method(*args, **kwargs)

    return patched_step
