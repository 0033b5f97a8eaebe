"""debug_launcher and notebook_launcher start real processes through torch's elastic agent."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from accel_core.launchers import WorkerProcessError, debug_launcher, notebook_launcher
from accel_testing import free_port


@pytest.fixture(autouse=True)
def no_process_state():
    """The launchers refuse to start from a process with a PartialState: start each test without."""
    from accel_ops import PartialState

    PartialState._reset_state()
    yield
    PartialState._reset_state()


_SEEN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCEL_USE_CPU", "ACCEL_MIXED_PRECISION")


def write_rank(out_dir: str, tag: str) -> None:
    """Build the process state from the launch environment, all-reduce, write what this rank saw."""
    import accel_ops

    state = accel_ops.PartialState()
    total = accel_ops.reduce(torch.tensor([state.process_index + 1.0]), reduction="sum")
    seen = {name: os.environ.get(name) for name in _SEEN}
    seen["sum"] = total.item()
    seen["state"] = [state.num_processes, str(state.distributed_type.value), str(state.device)]
    seen["mixed_precision"] = state.launch_environment.mixed_precision
    Path(out_dir, f"{tag}-rank{state.process_index}.json").write_text(json.dumps(seen))
    state.destroy_process_group()


def fail_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken")


def return_something_unpicklable(out_dir: str) -> object:
    Path(out_dir, f"ran-{os.environ['RANK']}").touch()
    return lambda: None


def kill_rank_one() -> None:
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)


def _read(out_dir: Path, tag: str) -> list[dict]:
    return [json.loads((out_dir / f"{tag}-rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.multiprocess
def test_debug_launcher_runs_two_cpu_processes(tmp_path):
    debug_launcher(write_rank, args=(str(tmp_path), "debug"), num_processes=2)
    seen = _read(tmp_path, "debug")
    for rank, worker in enumerate(seen):
        assert worker == {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "ACCEL_USE_CPU": "1",
            "ACCEL_MIXED_PRECISION": "no",
            "sum": 3.0,
            "state": [2, "MULTI_CPU", "cpu"],
            "mixed_precision": "no",
        }
    assert "ACCEL_USE_CPU" not in os.environ  # the parent's environment is put back


@pytest.mark.multiprocess
def test_notebook_launcher_runs_two_processes(tmp_path):
    notebook_launcher(
        write_rank,
        args=(str(tmp_path), "notebook"),
        num_processes=2,
        mixed_precision="BF16",
        use_port=str(free_port()),
    )
    seen = _read(tmp_path, "notebook")
    assert [w["RANK"] for w in seen] == ["0", "1"]
    assert {w["ACCEL_MIXED_PRECISION"] for w in seen} == {"bf16"}
    assert {w["mixed_precision"] for w in seen} == {"bf16"}
    assert [w["state"][:2] for w in seen] == [[2, "MULTI_CPU"]] * 2
    assert {w["WORLD_SIZE"] for w in seen} == {"2"}
    assert {w["sum"] for w in seen} == {3.0}
    assert "ACCEL_MIXED_PRECISION" not in os.environ


@pytest.mark.multiprocess
def test_a_failing_worker_raises_an_error_naming_its_rank():
    with pytest.raises(
        RuntimeError, match="rank 1 of 2 failed: ValueError: rank one is broken"
    ) as info:
        debug_launcher(fail_on_rank_one)
    assert isinstance(info.value, WorkerProcessError)
    assert list(info.value.failed_ranks) == [1]
    assert 'raise ValueError("rank one is broken")' in info.value.failed_ranks[1]


@pytest.mark.multiprocess
def test_results_are_dropped_and_a_killed_worker_is_named(tmp_path):
    debug_launcher(return_something_unpicklable, args=(str(tmp_path),))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ran-0", "ran-1"]
    with pytest.raises(WorkerProcessError, match="rank 1 of 2 failed: killed by signal SIGKILL"):
        debug_launcher(kill_rank_one)


def test_one_process_runs_in_place_with_the_launch_environment():
    calls = []

    def train(a, b):
        calls.append((a, b, os.environ["ACCEL_MIXED_PRECISION"], os.getpid()))

    notebook_launcher(train, args=(1, 2), mixed_precision="fp16")
    notebook_launcher(train, args=(3, 4), num_processes=1)
    assert calls == [(1, 2, "fp16", os.getpid()), (3, 4, "no", os.getpid())]
    assert "ACCEL_MIXED_PRECISION" not in os.environ


def test_functions_that_cannot_be_pickled_are_refused():
    def nested():
        return None

    with pytest.raises(TypeError, match=r"top level of a module or notebook cell.*<lambda>"):
        debug_launcher(lambda: None)
    with pytest.raises(TypeError, match="nested"):
        notebook_launcher(nested, num_processes=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"mixed_precision": "fp8"},
            "mixed_precision='fp8' is not supported; choose one of no, fp16",
        ),
        ({"num_processes": 0}, "num_processes must be an int >= 1, got 0"),
        ({"num_nodes": 2, "node_rank": 2}, r"node_rank must be an int in \[0, num_nodes=2\)"),
    ],
)
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        notebook_launcher(write_rank, **kwargs)


def test_refuses_to_launch_from_a_process_with_a_process_group(tmp_path):
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    with pytest.raises(RuntimeError, match=r"already has a torch\.distributed process group"):
        debug_launcher(write_rank, args=(str(tmp_path), "never"))
    assert not list(tmp_path.glob("never-*"))


def test_refuses_to_launch_after_the_process_state_exists(tmp_path):
    from accel_ops import PartialState

    PartialState(cpu=True)
    try:
        with pytest.raises(RuntimeError, match=r"after PartialState\(\) or Accelerator\(\)"):
            notebook_launcher(write_rank, args=(str(tmp_path), "never"), num_processes=2)
    finally:
        PartialState._reset_state()
    assert not list(tmp_path.glob("never-*"))
