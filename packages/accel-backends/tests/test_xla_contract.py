"""accel-testing's strategy contract for the ``xla`` strategy, on one XLA CPU device.

One process: XLA's CPU device can't run several replicas (see test_xla_processes.py). Needs
torch_xla (the ``backend-xla`` session, ``PJRT_DEVICE=CPU``); skipped elsewhere.
"""

from __future__ import annotations

import pytest

torch_xla = pytest.importorskip("torch_xla")
torch_xla.device()  # the XLA runtime must start before any backward pass of the process

from accel_testing.strategy_contract import StrategyContract  # noqa: E402


class TestXLAContract(StrategyContract):
    strategy_factory = "accel_backends.xla.strategy:XLAStrategy"
    num_processes = 1
