"""Each test starts without a PartialState."""

from collections.abc import Iterator

import pytest

from accel_ops import PartialState


@pytest.fixture(autouse=True)
def fresh_partial_state() -> Iterator[None]:
    PartialState._reset_state()
    yield
    PartialState._reset_state()
