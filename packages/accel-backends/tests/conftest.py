"""Shared fixtures of accel-backends' tests: every test starts without launch variables."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

_PREFIXES = ("ACCEL_", "ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_")
_TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def no_launch_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Remove the variables plugins read, so each test sets exactly what it means."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _TORCHRUN:
            monkeypatch.delenv(name)
    yield
    from accel_ops.state import PartialState

    PartialState._reset_state()
