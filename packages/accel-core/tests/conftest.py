"""Shared fixtures of accel-core's tests: every test starts without leftover process-wide state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def fresh_states() -> Iterator[None]:
    """Forget AcceleratorState, GradientState and PartialState after each test."""
    yield
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
