"""accel-testing's strategy contract, run by accel-core's own strategies (DDP on 2 real processes,
gloo on CPU), and a check that the contract fails strategies that break it."""

from __future__ import annotations

import contextlib

import pytest
import torch

from accel_core.strategies.checkpoint_io import CheckpointIO
from accel_core.strategies.ddp import DDPStrategy
from accel_core.strategies.single_device import SingleDeviceStrategy
from accel_testing.processes import WorkersFailed
from accel_testing.strategy_contract import (
    CHECKS,
    StrategyContract,
    check_checkpoint_round_trip,
    run_contract,
)


class TestSingleDeviceContract(StrategyContract):
    strategy_factory = "accel_core.strategies.single_device:SingleDeviceStrategy"


class TestDDPContract(StrategyContract):
    strategy_factory = "accel_core.strategies.ddp:DDPStrategy"
    num_processes = 2


def test_the_contract_has_every_check_the_interface_promises():
    assert list(CHECKS) == [
        "joint_setup",
        "step_changes_weights",
        "clipping",
        "accumulation",
        "state_dict_round_trip",
        "checkpoint_round_trip",
        "unwrap",
        "teardown",
    ]


class _NeverSteps(SingleDeviceStrategy):
    name = "never_steps"

    def optimizer_step(self, optimizer, closure=None):
        return None


class _ForgetfulCheckpointIO(CheckpointIO):
    def load_checkpoint(self, reader, models, optimizers, **options):
        return None


class _ForgetsOnLoad(SingleDeviceStrategy):
    name = "forgets_on_load"

    def __init__(self, kwargs_handlers=(), **options):
        super().__init__(kwargs_handlers, **options)
        self.checkpoint_io = _ForgetfulCheckpointIO(self)


class _ClipsNothing(SingleDeviceStrategy):
    name = "clips_nothing"

    def clip_gradients_norm(self, module, optimizer, max_norm, norm_type=2.0, *, parameters=None):
        return torch.tensor(float(max_norm) * 10)


@pytest.mark.parametrize(
    ("strategy", "check", "message"),
    [
        (_NeverSteps, "step_changes_weights", "training did not change the weights"),
        (_ForgetsOnLoad, "checkpoint_round_trip", "weights not restored"),
        (_ClipsNothing, "clipping", "after clipping the norm is"),
    ],
)
def test_the_contract_fails_a_strategy_that_breaks_it(strategy, check, message, tmp_path):
    with pytest.raises(AssertionError, match=message):
        run_contract(strategy, tmp_path, [check])


def test_a_check_runs_on_a_callable_factory(tmp_path):
    check_checkpoint_round_trip(SingleDeviceStrategy, tmp_path)
    assert (tmp_path / "checkpoint").is_dir()


class SyncsEveryBatch(DDPStrategy):
    """Claims no-sync but synchronises anyway (what the accumulation check must catch)."""

    name = "syncs_every_batch"

    def no_sync(self, model):
        return contextlib.nullcontext()


def test_the_contract_on_processes_fails_a_no_sync_that_syncs(tmp_path):
    class _Broken(StrategyContract):
        strategy_factory = f"{__name__}:SyncsEveryBatch"  # workers get this process's sys.path
        num_processes = 2

    with pytest.raises(WorkersFailed, match="batch 0: gradients equal=True"):
        _Broken().test_contract("every_check_on_2_processes", tmp_path)
