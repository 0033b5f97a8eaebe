"""LocalSGD: local steps without gradient sync, then parameters averaged across processes."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import torch

import accel_ops
from accel_core.local_sgd import LocalSGD
from accel_core.strategies.ddp import DDPStrategy
from accel_core.strategies.single_device import SingleDeviceStrategy
from accel_ops import PartialState
from accel_testing import run_workers


class ProcessOps:
    """What LocalSGD needs from an Accelerator, backed by the real accel_ops state."""

    def __init__(self) -> None:
        self.state = PartialState()

    @property
    def num_processes(self) -> int:
        return self.state.num_processes

    strategy = DDPStrategy()  # replicates the model, as LocalSGD needs

    def reduce(self, tensor, reduction="sum"):
        return accel_ops.reduce(tensor, reduction=reduction)

    def wait_for_everyone(self) -> None:
        self.state.wait_for_everyone()


def _params(module: torch.nn.Module) -> list:
    return [p.detach().clone().tolist() for p in module.parameters()]


def _train_step(model, optimizer, x, y) -> None:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()


def local_sgd_worker():
    """Run the scenario with the stand-in, then with the real Accelerator, in the same processes."""
    _scenario("stand-in")
    _scenario("accelerator")
    PartialState().destroy_process_group()


def _scenario(kind: str) -> None:
    """Two local steps (sync at the 2nd), one more step, then the sync on leaving the block."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    if kind == "stand-in":
        accelerator = ProcessOps()
        model = torch.nn.parallel.DistributedDataParallel(module)
    else:
        from accel_core import Accelerator

        accelerator = Accelerator(cpu=True)
        model = accelerator.prepare(module)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
    rank = PartialState().process_index
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # The same optimisation on a plain copy, without DDP: what a rank computes on its own.
    local = copy.deepcopy(model.module)
    local_optimizer = torch.optim.SGD(local.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(10 + rank)  # each rank its own data
    report: dict = {"rank": rank, "grads_are_local": []}
    with LocalSGD(accelerator, model, local_sgd_steps=2) as local_sgd:
        for step in range(3):
            x, y = torch.randn(8, 3, generator=gen), torch.randn(8, 1, generator=gen)
            _train_step(model, optimizer, x, y)
            _train_step(local, local_optimizer, x, y)
            report["grads_are_local"].append(
                all(
                    torch.equal(a.grad, b.grad)
                    for a, b in zip(model.parameters(), local.parameters(), strict=True)
                )
            )
            optimizer.zero_grad()
            local_optimizer.zero_grad()
            report[f"before_{step}"] = _params(model)
            local_sgd.step()
            report[f"after_{step}"] = _params(model)
            local.load_state_dict(model.module.state_dict())  # follow the averaged weights
    report["after_exit"] = _params(model)
    report["num_steps"] = local_sgd.num_steps
    Path(os.environ["OUT"], f"{kind}-rank{rank}.json").write_text(json.dumps(report))


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("local_sgd")
    results = run_workers(
        2, function=f"{__file__}::local_sgd_worker", env={"OUT": str(out)}, timeout=120, check=False
    )
    return out, results


def _check_two_processes(two_process_run, kind: str) -> None:
    out, results = two_process_run
    files = [out / f"{kind}-rank{r}.json" for r in range(2)]
    if not all(f.exists() for f in files):
        logs = "\n".join(f"rank {r.rank}:\n{r.stderr[-3000:]}" for r in results)
        pytest.fail(f"the {kind} scenario did not finish:\n{logs}")
    rank0, rank1 = (json.loads(f.read_text()) for f in files)
    for report in (rank0, rank1):
        assert report["grads_are_local"] == [True, True, True]  # no_sync: DDP did not average
        assert report["after_0"] == report["before_0"]  # step 1 of 2: no averaging
        assert report["num_steps"] == 3

    def mean(a, b):
        return [((torch.tensor(x) + torch.tensor(y)) / 2) for x, y in zip(a, b, strict=True)]

    for before, after in (("before_1", "after_1"), ("after_2", "after_exit")):
        assert rank0[before] != rank1[before]  # local steps made the ranks diverge
        expected = mean(rank0[before], rank1[before])
        for report in (rank0, rank1):
            for got, want in zip(report[after], expected, strict=True):
                torch.testing.assert_close(torch.tensor(got), want, rtol=0, atol=1e-7)
    assert rank0["after_2"] == rank0["before_2"]  # step 3: not a multiple of 2


@pytest.mark.multiprocess
@pytest.mark.slow
def test_parameters_are_averaged_with_a_stand_in_accelerator(two_process_run):
    _check_two_processes(two_process_run, "stand-in")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_parameters_are_averaged_with_the_accelerator(two_process_run):
    _check_two_processes(two_process_run, "accelerator")
    assert all(r.returncode == 0 for r in two_process_run[1])


class OneProcess:
    num_processes = 1
    strategy = SingleDeviceStrategy()

    def reduce(self, tensor, reduction="sum"):
        raise AssertionError("no communication expected on one process")


def test_one_process_is_a_no_op():
    model = torch.nn.Linear(2, 2)
    before = _params(model)
    with LocalSGD(OneProcess(), model, local_sgd_steps=1) as local_sgd:
        for _ in range(3):
            local_sgd.step()
    assert not local_sgd.enabled
    assert local_sgd.num_steps == 3
    assert _params(model) == before


def test_a_strategy_that_does_not_replicate_the_model_and_bad_steps():
    class ShardingStrategy(SingleDeviceStrategy):
        name = "sharding"

        def __init__(self) -> None:
            super().__init__()
            self.compat.replicates_model = False

    class Sharded(OneProcess):
        strategy = ShardingStrategy()

    model = torch.nn.Linear(2, 2)
    with pytest.raises(NotImplementedError, match="strategy 'sharding' does not"):
        LocalSGD(Sharded(), model, local_sgd_steps=2)
    with pytest.raises(ValueError, match="local_sgd_steps must be an int >= 1, got 0"):
        LocalSGD(OneProcess(), model, local_sgd_steps=0)
    with pytest.raises(TypeError, match="local_sgd_steps must be an int >= 1"):
        LocalSGD(OneProcess(), model, local_sgd_steps=2.5)
