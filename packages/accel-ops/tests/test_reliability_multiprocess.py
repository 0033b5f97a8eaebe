"""Real processes on gloo: tensors that require grad, mismatched inputs, the in-flight record
of a waiting rank, and a clean exit without any teardown by the user.

One worker function per concern, each run once on 2 processes (and the mismatch one on 3): a
worker prints one ``REPORT <json>`` line and the test asserts on every rank's report.
"""

import json
import os
import re
import time
from pathlib import Path

import pytest

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _reports(results):
    reports = []
    for result in results:
        lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
        assert lines, f"rank {result.rank} printed no report:\n{result.stdout}\n{result.stderr}"
        reports.append(json.loads(lines[-1][len("REPORT ") :]))
    return reports


def grad_worker():
    import torch

    import accel_ops as ao

    state = ao.PartialState()
    rank, n = state.process_index, state.num_processes
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.full((2, 3), float(rank)))
    loss = (weight * 2).sum()
    out = {}
    gathered = ao.gather(weight)
    out["gather_param"] = [gathered.tolist(), gathered.requires_grad]
    gathered = ao.gather(loss)
    out["gather_loss"] = [gathered.tolist(), gathered.requires_grad]
    out["gather_loss_view"] = ao.gather(loss.reshape(1)).tolist()
    out["gather_transposed"] = ao.gather(weight.t()).tolist()  # a non-contiguous view
    out["gather_nested"] = ao.gather({"a": [loss, weight[:, 1]]})["a"][1].tolist()
    reduced = ao.reduce(loss, "sum")
    out["reduce_loss"] = reduced.item()
    out["reduce_input_unchanged"] = loss.item()
    padded = ao.pad_across_processes(weight[: rank + 1], dim=0)
    out["pad"] = [list(padded.shape), padded.requires_grad]
    target = torch.nn.Parameter(torch.full((3, 2), float(rank)))
    ao.broadcast(target.t(), from_process=1)  # into a non-contiguous view of a leaf
    out["broadcast_view"] = target.tolist()
    ao.broadcast(weight, from_process=0)
    out["broadcast_param"] = [weight.tolist(), weight.requires_grad]
    out["n"] = n
    print("REPORT " + json.dumps(out), flush=True)


def test_every_collective_accepts_tensors_that_require_grad():
    results = run_workers(2, function=f"{__file__}::grad_worker", timeout=120)
    for rank, report in enumerate(_reports(results)):
        assert report["gather_param"] == [[[0.0] * 3] * 2 + [[1.0] * 3] * 2, False]
        # loss = 2 * sum(weight) = 12 * rank
        assert report["gather_loss"] == [[0.0, 12.0], False]
        assert report["gather_loss_view"] == [0.0, 12.0]
        assert report["gather_transposed"] == [[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 3
        assert report["gather_nested"] == [0.0, 0.0, 1.0, 1.0]
        assert report["reduce_loss"] == 12.0
        assert report["reduce_input_unchanged"] == 12.0 * rank
        assert report["pad"] == [[2, 3], True]  # padding keeps autograd, as Accelerate's does
        assert report["broadcast_view"] == [[1.0, 1.0]] * 3
        assert report["broadcast_param"] == [[[0.0] * 3] * 2, True]


def mismatch_worker():
    import torch

    import accel_ops as ao

    state = ao.PartialState()
    assert not state.debug
    rank = state.process_index
    # Caught in any mode: pad_across_processes compares a fingerprint inside its size exchange.
    always = {
        # along dim 0 sizes may differ; along dim 1 they must not
        "pad_other_dim": lambda: ao.pad_across_processes(torch.ones(rank + 1, rank + 2)),
        "pad_dtype": lambda: ao.pad_across_processes(
            torch.ones(rank + 1, dtype=torch.int32 if rank else torch.float)
        ),
        "pad_structure": lambda: ao.pad_across_processes({"k": [torch.ones(2)] * (rank + 1)}),
        # more than six tensors: the sizes take a second all-gather
        "pad_many": lambda: ao.pad_across_processes(
            [torch.ones(1 + rank, 2)] * 7 + [torch.ones(rank + 1)] * rank
        ),
    }
    # Caught in debug mode (without it, gloo would hand out garbage or abort the process).
    debug = {
        "gather_rows": lambda: ao.gather(torch.ones(rank + 1, 2)),
        # same bytes, other dtype: would be misread silently
        "gather_dtype": lambda: ao.gather(
            torch.ones(2, dtype=torch.int32 if rank else torch.float)
        ),
        # same number of elements, other shape
        "gather_shape": lambda: ao.gather(torch.ones((2, 3) if rank else (3, 2))),
        "gather_structure": lambda: ao.gather([torch.ones(2)] * (rank + 1)),
        "reduce": lambda: ao.reduce(torch.ones(rank + 2)),
        "broadcast": lambda: ao.broadcast(torch.ones(rank + 2)),
        # a rank that calls another collective at the same point: an error, not a hang
        "different_collectives": lambda: (
            ao.broadcast(torch.ones(2)) if rank == 1 else ao.gather(torch.ones(2))
        ),
    }
    out = {}
    for cases, mode in ((always, False), (debug, True)):
        state.debug = mode
        for name, case in cases.items():
            try:
                case()
                out[name] = "no error"
            except ao.DistributedOperationException as error:
                out[name] = str(error)
    state.debug = False
    # After every refused call the group still works, with the right values.
    out["after"] = ao.gather(torch.tensor([rank])).tolist()
    padded = ao.pad_across_processes([torch.ones(rank + 1, 2)] * 8, dim=0)
    out["pad_many_ok"] = [list(tensor.shape) for tensor in padded]
    print("REPORT " + json.dumps(out), flush=True)


@pytest.mark.parametrize("n", [2, 3])
def test_mismatched_inputs_raise_on_every_rank(n):
    results = run_workers(n, function=f"{__file__}::mismatch_worker", timeout=120)
    for report in _reports(results):
        for name in ("pad_other_dim", "pad_dtype", "pad_structure", "pad_many"):
            assert report[name].startswith("pad_across_processes: the ranks passed"), name
        assert "rank 1: shape (*, 3) float32" in report["pad_other_dim"]
        assert "rank 0: shape (*, 2) float32" in report["pad_other_dim"]
        assert "rank 1: shape (*) int32" in report["pad_dtype"]
        for name in ("gather_rows", "gather_dtype", "gather_shape", "gather_structure"):
            assert report[name].startswith("gather: the ranks passed different shapes"), name
        assert "rank 0: shape (1, 2) float32" in report["gather_rows"]
        assert "rank 1: shape (2, 2) float32" in report["gather_rows"]
        assert "rank 1: shape (2) int32" in report["gather_dtype"]
        assert "rank 1: shape (2, 3) float32" in report["gather_shape"]
        assert report["reduce"].startswith("reduce: the ranks passed different shapes")
        assert report["broadcast"].startswith("broadcast: the ranks passed different shapes")
        assert "the ranks called different collectives" in report["different_collectives"]
        assert "rank 1: broadcast of shape (2) float32" in report["different_collectives"]
        assert "rank 0: gather of shape (2) float32" in report["different_collectives"]
        assert report["after"] == list(range(n))
        assert report["pad_many_ok"] == [[n, 2]] * 8


def inflight_worker():
    import torch

    import accel_ops as ao

    folder = Path(os.environ["ACCEL_HANG_REPORT_DIR"])
    state = ao.PartialState()
    rank = state.process_index
    if rank == 1:
        # Rank 0 waits in the gather below; this rank sleeps outside any collective, then
        # reads what rank 0's reporter wrote before joining.
        deadline = time.monotonic() + 30
        record = {}
        while time.monotonic() < deadline:
            try:
                record = json.loads((folder / "rank-0.json").read_text())
            except (OSError, ValueError):
                record = {}
            if record.get("state") == "waiting":
                break
            time.sleep(0.1)
        mine = json.loads((folder / "rank-1.json").read_text())
        print("REPORT " + json.dumps({"rank0": record, "rank1": mine}), flush=True)
    ao.gather(torch.ones(4, 5, dtype=torch.float16))  # the line the record must name
    if rank == 0:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if json.loads((folder / "rank-0.json").read_text())["state"] == "running":
                break
            time.sleep(0.1)
        print("REPORT " + json.dumps(json.loads((folder / "rank-0.json").read_text())))


def test_a_waiting_rank_records_its_collective_and_call_site(tmp_path):
    env = {"ACCEL_HANG_REPORT_DIR": str(tmp_path)}
    results = run_workers(2, function=f"{__file__}::inflight_worker", env=env, timeout=120)
    after, during = _reports(results)
    rank0 = during["rank0"]
    assert rank0["state"] == "waiting", during
    assert rank0["operation"] == "gather"
    assert rank0["inputs"] == "shape (4, 5) float16"
    site = re.fullmatch(r"(.+):(\d+) in (\w+)", rank0["call_site"])
    assert site, rank0["call_site"]
    file, line, where = site.groups()
    assert file == __file__ and where == "inflight_worker"
    source = Path(__file__).read_text().splitlines()[int(line) - 1]
    assert "the line the record must name" in source
    assert 0 < time.time() - rank0["since"] < 60
    assert during["rank1"]["state"] == "running"
    assert after["state"] == "running"  # the gather ended
    # at exit each rank says so
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank-{rank}.json").read_text())["state"] == "exited"


def no_teardown_worker():
    import torch

    import accel_ops as ao

    state = ao.PartialState()
    ao.gather(torch.tensor([state.process_index]))
    if os.environ.get("RAISE_ON") == str(state.process_index):
        raise ValueError("raised by the script")
    # no destroy_process_group(): the exit teardown must leave a clean exit


def test_finished_workers_exit_zero_without_any_teardown():
    # A plain interpreter: the exit teardown registered by PartialState does the work.
    for _ in range(5):
        results = run_workers(
            2, function=f"{__file__}::no_teardown_worker", timeout=120, bootstrap=False
        )
        for result in results:
            assert result.returncode == 0
            assert "terminate called" not in result.stderr


def test_a_script_that_raises_exits_one_with_its_traceback_not_sigabrt():
    results = run_workers(
        2,
        function=f"{__file__}::no_teardown_worker",
        env={"RAISE_ON": "1"},
        timeout=120,
        check=False,
        bootstrap=False,
    )
    assert [result.returncode for result in results] == [0, 1]
    assert "ValueError: raised by the script" in results[1].stderr
    assert "terminate called" not in results[1].stderr
