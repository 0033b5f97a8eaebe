"""``Strategy.forward_backward``, the one-call step a pipelining engine replaces with its schedule:
on accel-core's strategies it equals forward + ``accelerator.backward`` bit for bit (one process
in the test process; DDP on 2 real processes, gloo on CPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from accel_core.strategies.ddp import DDPStrategy
from accel_core.strategies.single_device import SingleDeviceStrategy
from accel_core.strategies.step import call_model, loss_to_backward
from accel_testing.processes import run_workers
from accel_testing.strategy_contract import check_forward_backward


def test_forward_backward_equals_forward_and_backward_on_one_device(tmp_path):
    check_forward_backward(SingleDeviceStrategy, tmp_path)


def worker() -> None:
    from accel_ops import PartialState

    state = PartialState()
    check_forward_backward(DDPStrategy, Path(sys.argv[1]))
    print(f"EQUAL rank {state.process_index}", flush=True)
    state.destroy_process_group()


@pytest.mark.multiprocess
def test_forward_backward_equals_forward_and_backward_under_ddp(tmp_path):
    results = run_workers(
        2,
        function=f"{__file__}::worker",
        args=[str(tmp_path)],
        env={"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        timeout=180,
    )
    for result in results:
        assert f"EQUAL rank {result.rank}" in result.stdout, result.stderr[-2000:]


def test_the_model_gets_a_mapping_as_keywords_and_a_tuple_as_arguments():
    class Echo(torch.nn.Module):
        def forward(self, *args: object, **kwargs: object) -> tuple[object, ...]:
            return args, kwargs

    echo = Echo()
    assert call_model(echo, {"x": 1}) == ((), {"x": 1})
    assert call_model(echo, (1, 2)) == ((1, 2), {})
    assert call_model(echo, [1, 2]) == (([1, 2],), {})


def test_the_loss_is_divided_by_the_accumulation_steps_unless_the_engine_divides_it():
    loss = torch.tensor(6.0)
    assert float(loss_to_backward(loss, 3, handles_accumulation=False)) == 2.0
    assert loss_to_backward(loss, 3, handles_accumulation=True) is loss
    assert loss_to_backward(loss, 1, handles_accumulation=False) is loss
