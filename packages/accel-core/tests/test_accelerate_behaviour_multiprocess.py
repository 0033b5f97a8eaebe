"""Accelerate 1.15 behaviour that needs several processes: triggers, forced gradient sync, and a
data-parallel ParallelismConfig, on 2 real gloo processes (issue 11)."""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@dataclass
class _ParallelismConfig:
    """The fields of Accelerate's ParallelismConfig (the class itself lives in accel-backends)."""

    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    tp_size: int = 1
    cp_size: int = 1
    sp_size: int = 1
    device_mesh: object = None


# --------------------------------------------------------------------------------------------
# worker side


def _check_parallelism(results: dict) -> None:
    from accel_core import Accelerator
    from accel_core.state import AcceleratorState

    config = _ParallelismConfig(dp_replicate_size=2)
    accelerator = Accelerator(parallelism_config=config)
    mesh = accelerator.torch_device_mesh
    results["parallelism"] = {
        "strategy": accelerator.strategy.name,
        "multi_device": accelerator.multi_device,
        "mesh_names": list(mesh.mesh_dim_names),
        "mesh_shape": list(mesh.mesh.shape),
        "mesh_in_config": config.device_mesh is mesh,
        "dp_rank": accelerator.data_parallel_rank,
        "dp_flattened_rank": mesh["dp"].get_local_rank(),
        "tp_rank": accelerator.tensor_parallel_rank,
        "should_save_model": accelerator.should_save_model,
    }
    AcceleratorState._reset_state()  # keeps the process group
    ones = _ParallelismConfig()
    accelerator = Accelerator(parallelism_config=ones)
    results["parallelism_of_one"] = {
        "mesh": accelerator.torch_device_mesh is None,
        # on CPU processes Accelerate 1.15 leaves the size at 1 (not multi_device)
        "dp_replicate_size": ones.dp_replicate_size,
    }
    AcceleratorState._reset_state()
    # Context parallelism: no strategy trains on it, so the default (ddp) is chosen and the
    # Accelerator is built (this config object cannot build a mesh: the real ParallelismConfig
    # of accel-backends does); prepare() refuses before preparing, saying why.
    from accel_core.out_of_scope import OutOfScopeError

    accelerator = Accelerator(parallelism_config=_ParallelismConfig(cp_size=2))
    try:
        accelerator.prepare(torch.nn.Linear(2, 2))
        refused = None
    except OutOfScopeError as error:
        refused = str(error)
    results["context_parallel"] = {
        "strategy": accelerator.strategy.name,
        "refused": refused,
        "models": len(accelerator._models),
    }
    AcceleratorState._reset_state()


def _check_triggers(results: dict, rank: int) -> None:
    from accel_core import Accelerator

    accelerator = Accelerator()
    answers = [accelerator.check_trigger()]
    if rank == 1:
        accelerator.set_trigger()
    answers += [accelerator.check_trigger(), accelerator.check_trigger()]
    results["triggers"] = answers


def _check_trigger_sync(results: dict, rank: int) -> None:
    from accel_core import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    model = accelerator.prepare(model)
    grads = {}
    for label, trigger in (("without", False), ("with", True)):
        model.zero_grad()
        x_a = torch.tensor([[float(rank + 1)]])
        x_b = 10 * x_a
        with accelerator.no_sync(model):
            loss_a = model(x_a).sum()  # first forward pass
            loss_b = model(x_b).sum()  # second forward pass
        accelerator.backward(loss_a)  # no synchronisation, only accumulation
        if trigger:
            with accelerator.trigger_sync_in_backward(model):
                accelerator.backward(loss_b)  # synchronises across the processes
        else:
            accelerator.backward(loss_b)
        grads[label] = model.module.weight.grad.item()
    results["trigger_sync"] = {"type": type(model).__name__, **grads}


def worker() -> None:
    out = Path(os.environ["OUT"])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    results: dict = {}
    for check in (
        lambda: _check_parallelism(results),
        lambda: _check_triggers(results, rank),
        lambda: _check_trigger_sync(results, rank),
    ):
        try:
            check()
        except Exception:
            results.setdefault("errors", []).append(traceback.format_exc())
            break  # the other rank may now wait in a collective: stop here, report
    (out / f"rank{rank}.json").write_text(json.dumps(results))


# --------------------------------------------------------------------------------------------
# test side


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("accelerate_behaviour")
    run_workers(2, function=f"{__file__}::worker", env={"OUT": str(out)}, timeout=180)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, result in enumerate(results):
        assert "errors" not in result, f"rank {rank}:\n" + "\n".join(result["errors"])
    return results


def test_parallelism_config_builds_the_mesh_and_prepare_refuses_context_parallelism(run):
    for rank, result in enumerate(run):
        assert result["parallelism"] == {
            "strategy": "ddp",
            "multi_device": False,  # CPU processes, as in Accelerate
            "mesh_names": ["dp_replicate"],
            "mesh_shape": [2],
            "mesh_in_config": True,
            "dp_rank": rank,
            "dp_flattened_rank": rank,
            "tp_rank": 0,
            "should_save_model": True,
        }
        assert result["parallelism_of_one"] == {"mesh": True, "dp_replicate_size": 1}
        refusal = result["context_parallel"]
        assert (refusal["strategy"], refusal["models"]) == ("ddp", 0)
        assert refusal["refused"].startswith(
            "Context parallelism (ParallelismConfig(cp_size=2)) is not run by strategy 'ddp': "
            "context parallelism is not run by accel: torch's context-parallel attention has no "
            "CPU kernel"
        )
        assert "prepare() does not train on this dimension" in refusal["refused"]


def test_a_trigger_set_on_one_process_is_seen_by_all_once(run):
    for result in run:
        assert result["triggers"] == [False, True, False]


def test_trigger_sync_in_backward_averages_the_accumulated_gradients(run):
    # local gradient: x_a + x_b = 11 * (rank + 1); averaged over ranks 0 and 1: 16.5
    for rank, result in enumerate(run):
        sync = result["trigger_sync"]
        assert sync["type"] == "DistributedDataParallel"
        assert sync["without"] == pytest.approx(11.0 * (rank + 1))
        assert sync["with"] == pytest.approx(16.5)
