"""accel-testing's strategy contract for the FSDP2 strategy, on 2 real processes (gloo, CPU)."""

from __future__ import annotations

from accel_testing.strategy_contract import StrategyContract


class TestFSDPContract(StrategyContract):
    strategy_factory = "accel_backends.fsdp.strategy:FSDPStrategy"
    num_processes = 2
