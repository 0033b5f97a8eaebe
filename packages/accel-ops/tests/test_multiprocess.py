"""Real processes on gloo: every collective checked value by value on 2 and 3 processes.

Each process count runs one worker function that makes many checks (one launch per count keeps
the suite fast). A worker fails by raising; it prints ``CHECKS-OK <count>`` when all passed.
"""

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

Pair = namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Sample:
    ids: object
    mask: object = None


class Checks:
    def __init__(self):
        self.count = 0

    def equal(self, actual, expected, what):
        import torch

        if isinstance(expected, torch.Tensor):
            same = (
                isinstance(actual, torch.Tensor)
                and actual.dtype == expected.dtype
                and actual.shape == expected.shape
                and torch.equal(actual, expected)
            )
        else:
            same = actual == expected
        if not same:
            raise AssertionError(f"{what}: got {actual!r}, expected {expected!r}")
        self.count += 1


def collectives_worker():
    import torch
    import torch.distributed as dist

    import accel_ops as ao

    c = Checks()
    if os.environ.get("PREINIT") == "1":  # the user formed the group before PartialState
        dist.init_process_group("gloo")
        # Without a PartialState the collectives use the default group.
        me, size = dist.get_rank(), dist.get_world_size()
        c.equal(ao.gather(torch.tensor([me])), torch.arange(size), "gather without state")
        c.equal(ao.gather_object([me]), list(range(size)), "gather_object without state")
        c.equal(ao.is_initialized(), False, "no state yet")
    state = ao.PartialState()
    rank, n = state.process_index, state.num_processes
    c.equal(state._created_group, os.environ.get("PREINIT") != "1", "created group")
    c.equal((state.backend, state.distributed_type), ("gloo", ao.DistributedType.MULTI_CPU), "kind")
    c.equal(
        (n, rank, state.local_process_index),
        (int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]), rank),
        "ranks",
    )
    c.equal(state.device, torch.device("cpu"), "device")
    c.equal((state.is_main_process, state.is_last_process), (rank == 0, rank == n - 1), "roles")
    c.equal(state.use_distributed, True, "use_distributed")

    # gather: plain, 0-dim, non-contiguous, dtypes
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    c.equal(ao.gather(base + 10 * rank), torch.cat([base + 10 * k for k in range(n)]), "gather")
    c.equal(ao.gather(torch.tensor(rank)), torch.arange(n), "gather 0-dim")
    t = torch.arange(6).reshape(2, 3).t()
    c.equal(ao.gather(t + rank), torch.cat([t + k for k in range(n)]), "gather non-contiguous")
    flags = torch.tensor([rank % 2 == 0, True])
    c.equal(
        ao.gather(flags), torch.tensor([v for k in range(n) for v in (k % 2 == 0, True)]), "bool"
    )
    half = torch.tensor([rank + 0.5], dtype=torch.bfloat16)
    c.equal(
        ao.gather(half), torch.tensor([k + 0.5 for k in range(n)], dtype=torch.bfloat16), "bf16"
    )

    # gather: nested dict / list / tuple / namedtuple / dataclass
    nested = {
        "logits": torch.full((2, 2), float(rank)),
        "list": [torch.tensor([rank]), (torch.tensor([[rank, -rank]]),)],
        "pair": Pair(torch.tensor([rank]), torch.tensor([2 * rank])),
        "sample": Sample(ids=torch.tensor([rank, rank + 1]), mask=torch.tensor([True])),
    }
    out = ao.gather(nested)
    c.equal(
        out["logits"], torch.cat([torch.full((2, 2), float(k)) for k in range(n)]), "nested dict"
    )
    c.equal(out["list"][0], torch.arange(n), "nested list")
    c.equal(type(out["list"][1]), tuple, "tuple kept")
    c.equal(out["list"][1][0], torch.tensor([[k, -k] for k in range(n)]), "nested tuple")
    c.equal(type(out["pair"]), Pair, "namedtuple kept")
    c.equal(out["pair"].b, torch.tensor([2 * k for k in range(n)]), "namedtuple")
    c.equal(type(out["sample"]), Sample, "dataclass kept")
    c.equal(out["sample"].ids, torch.tensor([v for k in range(n) for v in (k, k + 1)]), "dataclass")
    c.equal(out["sample"].mask, torch.tensor([True] * n), "dataclass second field")

    # uneven sizes: pad_across_processes then gather
    uneven = torch.full((rank + 1, 3), float(rank + 1))
    padded = ao.pad_across_processes(uneven, pad_index=-1)
    c.equal(padded.shape, torch.Size([n, 3]), "padded shape")
    expected_rows = []
    for k in range(n):
        expected_rows += [[float(k + 1)] * 3] * (k + 1) + [[-1.0] * 3] * (n - k - 1)
    c.equal(ao.gather(padded), torch.tensor(expected_rows), "pad then gather")
    first = ao.pad_across_processes(torch.arange(rank + 1), pad_first=True)
    c.equal(first, torch.tensor([0] * (n - rank - 1) + list(range(rank + 1))), "pad_first")
    wide = ao.pad_across_processes(torch.ones(2, rank + 1), dim=1)
    c.equal(wide, torch.tensor([[1.0] * (rank + 1) + [0.0] * (n - rank - 1)] * 2), "pad dim=1")
    wide_neg = ao.pad_across_processes(torch.ones(2, rank + 1), dim=-1)
    c.equal(wide_neg, wide, "pad dim=-1")
    many = ao.pad_across_processes(
        {"a": torch.ones(rank + 1), "b": [torch.ones(n - rank, 2)], "s": torch.tensor(5)}
    )
    c.equal(many["a"], torch.tensor([1.0] * (rank + 1) + [0.0] * (n - rank - 1)), "nested pad a")
    c.equal(many["b"][0].shape, torch.Size([n, 2]), "nested pad b")
    c.equal(many["s"], torch.tensor(5), "0-dim untouched by pad")
    same = torch.ones(2)
    c.equal(ao.pad_across_processes(same) is same, True, "no padding needed returns input")

    # a non-tensor leaf: TypeError naming its path, on every rank
    try:
        ao.gather({"batch": {"labels": [torch.ones(1), "text"]}})
        c.equal("no error", "TypeError", "non-tensor leaf")
    except TypeError as error:
        c.equal("found str at tensor['batch']['labels'][1]" in str(error), True, "leaf path")

    # gather_object
    c.equal(
        ao.gather_object([rank, f"s{rank}"]),
        [v for k in range(n) for v in (k, f"s{k}")],
        "gather_object list",
    )
    c.equal(ao.gather_object({"rank": rank}), [{"rank": k} for k in range(n)], "gather_object dict")

    # broadcast (in place) and broadcast_object_list
    source = n - 1
    buffer = torch.full((2, 3), float(rank))
    result = ao.broadcast(buffer, from_process=source)
    c.equal(result is buffer, True, "broadcast in place")
    c.equal(buffer, torch.full((2, 3), float(source)), "broadcast value")
    tree = {"x": [torch.tensor([rank, rank])], "y": Pair(torch.tensor(rank), torch.zeros(1) + rank)}
    tree = ao.broadcast(tree)
    c.equal(tree["x"][0], torch.tensor([0, 0]), "nested broadcast list")
    c.equal(tree["y"].b, torch.zeros(1), "nested broadcast namedtuple")
    view = torch.arange(6.0).reshape(2, 3).t() * (rank + 1)
    ao.broadcast(view, from_process=1)
    c.equal(view, torch.arange(6.0).reshape(2, 3).t() * 2, "broadcast into non-contiguous")
    objects = [rank, {"k": [rank]}, None if rank else "from0"]
    c.equal(
        ao.broadcast_object_list(objects, from_process=1),
        [1, {"k": [1]}, None],
        "broadcast_object_list",
    )
    c.equal(objects, [1, {"k": [1]}, None], "broadcast_object_list in place")
    try:
        ao.broadcast(torch.ones(1), from_process=n)
    except ValueError as error:
        c.equal(f"there are {n} processes" in str(error), True, "from_process range")

    # reduce
    value = torch.tensor([1.0, 2.0]) * (rank + 1)
    total = sum(range(1, n + 1))
    c.equal(ao.reduce(value, "sum"), torch.tensor([1.0, 2.0]) * total, "reduce sum")
    c.equal(ao.reduce(value), torch.tensor([1.0, 2.0]) * total / n, "reduce mean (default)")
    c.equal(ao.reduce(value, "max"), torch.tensor([1.0, 2.0]) * n, "reduce max")
    c.equal(ao.reduce(value, "none"), value, "reduce none")
    c.equal(ao.reduce(value, "sum", scale=0.5), torch.tensor([1.0, 2.0]) * total * 0.5, "scale")
    c.equal(value, torch.tensor([1.0, 2.0]) * (rank + 1), "reduce leaves input alone")
    ints = ao.reduce({"i": [torch.tensor([rank])]}, "mean")
    c.equal(ints["i"][0], torch.tensor([sum(range(n)) / n]), "integer mean is float")

    # copy_tensor_to_devices
    copied = ao.copy_tensor_to_devices(torch.arange(3.0) + 100 if rank == 1 else None)
    c.equal(copied, torch.arange(3.0) + 100, "copy_tensor_to_devices")

    # split_between_processes
    expected_split = {
        2: ([[0, 1, 2, 3], [4, 5, 6]], [[0, 1, 2, 3], [4, 5, 6, 6]]),
        3: ([[0, 1, 2], [3, 4], [5, 6]], [[0, 1, 2], [3, 4, 6], [5, 6, 6]]),
    }[n]
    with state.split_between_processes(list(range(7))) as part:
        c.equal(part, expected_split[0][rank], "split list")
    with state.split_between_processes(list(range(7)), apply_padding=True) as part:
        c.equal(part, expected_split[1][rank], "split list padded")
    with state.split_between_processes(torch.arange(7), apply_padding=True) as part:
        c.equal(part, torch.tensor(expected_split[1][rank]), "split tensor padded")
        c.equal(ao.gather(part).tolist(), [v for s in expected_split[1] for v in s], "gather split")
    with state.split_between_processes({"t": tuple(range(7)), "x": torch.arange(7)}) as part:
        c.equal(part["t"], tuple(expected_split[0][rank]), "split dict tuple")
        c.equal(part["x"], torch.tensor(expected_split[0][rank]), "split dict tensor")
    with state.split_between_processes(["A"]) as part:
        c.equal(part, ["A"] if rank == 0 else [], "fewer inputs than processes")
    with state.split_between_processes(["A"], apply_padding=True) as part:
        c.equal(part, ["A"], "fewer inputs, padded")

    # main_process_first ordering, through a shared file
    log = Path(os.environ["OUT"]) / "order.log"

    def note(text):
        with open(log, "a") as handle:
            handle.write(text + "\n")

    with state.main_process_first():
        note(f"enter {rank}")
        if rank == 0:
            time.sleep(0.3)
        note(f"leave {rank}")
    state.wait_for_everyone()
    lines = log.read_text().splitlines()
    c.equal(lines[:2], ["enter 0", "leave 0"], "main process first")
    c.equal(
        sorted(lines[2:]),
        sorted(f"{w} {k}" for k in range(1, n) for w in ("enter", "leave")),
        "others after",
    )
    with state.local_main_process_first():
        pass

    # decorators
    calls = []
    state.on_main_process(lambda: calls.append("main"))()
    state.on_local_main_process(lambda: calls.append("local main"))()
    state.on_last_process(lambda: calls.append("last"))()
    state.on_process(process_index=1)(lambda: calls.append("one"))()

    @state.on_process(process_index=n - 1)
    def decorated():
        calls.append("decorated")
        return 5

    decorated()
    state.on_local_process(local_process_index=1)(lambda: calls.append("local one"))()
    expected_calls = [
        name
        for runs, name in (
            (rank == 0, "main"),
            (rank == 0, "local main"),
            (rank == n - 1, "last"),
            (rank == 1, "one"),
            (rank == n - 1, "decorated"),
            (rank == 1, "local one"),
        )
        if runs
    ]
    c.equal(calls, expected_calls, "decorators")

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        state.print("only main")
    c.equal(printed.getvalue(), "only main\n" if rank == 0 else "", "print")

    # debug mode with matching shapes passes
    state.debug = True
    c.equal(ao.gather(torch.ones(1)), torch.ones(n), "debug gather ok")
    c.equal(ao.pad_across_processes(torch.ones(rank + 1)).shape, torch.Size([n]), "debug pad ok")
    state.debug = False

    # an explicit group: ranks 0 and n-1 only
    group = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        c.equal(
            ao.gather(torch.tensor([rank]), group=group), torch.tensor([0, n - 1]), "group gather"
        )
        c.equal(
            ao.reduce(torch.tensor([rank]), "sum", group=group),
            torch.tensor([n - 1]),
            "group reduce",
        )
        c.equal(
            ao.broadcast(torch.tensor([rank]), from_process=1, group=group),
            torch.tensor([n - 1]),
            "group broadcast",
        )
        c.equal(ao.gather_object([rank], group=group), [0, n - 1], "group gather_object")
        c.equal(
            ao.broadcast_object_list([rank], 1, group=group), [n - 1], "group broadcast_object_list"
        )
        c.equal(
            ao.pad_across_processes(torch.ones(rank), group=group).shape,
            torch.Size([n - 1]),
            "group pad",
        )
    ao.wait_for_everyone()
    print(f"CHECKS-OK {c.count}")
    print(f"DEBUG-REPORT {json.dumps(debug_mismatch_checks(state))}")
    state.wait_for_everyone()
    state.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    return run_workers(
        2, function=f"{__file__}::collectives_worker", env={"OUT": str(out)}, timeout=180
    )


@pytest.fixture(scope="module")
def three_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("three")
    env = {"OUT": str(out), "PREINIT": "1"}  # the user made the group before PartialState
    return run_workers(3, function=f"{__file__}::collectives_worker", env=env, timeout=180)


def _assert_all_ok(results, preinit):
    n = len(results)
    for rank, text in enumerate(_reports(results, "CHECKS-OK")):
        in_group = rank in (0, n - 1)
        assert int(text) == 62 + (6 if in_group else 0) + (3 if preinit else 0)


def test_collectives_on_two_processes(two_process_run):
    _assert_all_ok(two_process_run, preinit=False)


def test_collectives_on_three_processes_with_a_user_made_group(three_process_run):
    _assert_all_ok(three_process_run, preinit=True)


def debug_mismatch_checks(state):
    """Debug mode on: mismatched inputs must raise on every rank, at once."""
    import torch

    import accel_ops as ao

    rank = state.process_index
    state.debug = True
    report = {}
    for name, call in (
        ("gather", lambda: ao.gather({"x": torch.ones(rank + 1, 2)})),
        ("reduce", lambda: ao.reduce(torch.ones(2, dtype=torch.float32 if rank else torch.int64))),
        ("broadcast", lambda: ao.broadcast([torch.ones(2)] * (rank + 1))),
    ):
        state.wait_for_everyone()  # time from the moment every rank is ready
        start = time.monotonic()
        try:
            call()
            report[name] = "no error"
        except ao.DistributedOperationException as error:
            report[name] = {"message": str(error), "seconds": time.monotonic() - start}
    state.debug = False
    return report


def _reports(results, tag):
    reports = []
    for result in results:
        lines = [line for line in result.stdout.splitlines() if line.startswith(tag)]
        assert lines, f"rank {result.rank} printed no {tag}:\n{result.stdout}\n{result.stderr}"
        reports.append(lines[0][len(tag) + 1 :])
    return reports


def test_debug_mode_mismatch_raises_on_every_rank(two_process_run, three_process_run):
    for results in (two_process_run, three_process_run):
        n = len(results)
        for text in _reports(results, "DEBUG-REPORT"):
            report = json.loads(text)
            gather, reduce, broadcast = report["gather"], report["reduce"], report["broadcast"]
            for item in (gather, reduce, broadcast):
                assert isinstance(item, dict), report
                assert item["seconds"] < 5
            assert gather["message"].startswith("gather: the ranks passed different shapes")
            for k in range(n):
                assert f"rank {k}: shape ({k + 1}, 2) float32" in gather["message"]
            assert "pad_across_processes" in gather["message"]
            assert "rank 0: shape (2) int64" in reduce["message"]
            assert "rank 1: shape (2) float32" in reduce["message"]
            assert "rank 0: shape (2) float32\n" in broadcast["message"]
            assert "rank 1: shape (2) float32; shape (2) float32" in broadcast["message"]


def timeout_worker():
    import torch

    import accel_ops as ao

    # Start together (a file barrier), so the 3 s timeout can't expire while a slow rank is
    # still importing torch.
    out, rank = Path(os.environ["OUT"]), int(os.environ["RANK"])
    (out / f"ready{rank}").touch()
    while not all((out / f"ready{k}").exists() for k in range(2)):
        time.sleep(0.05)
    state = ao.PartialState(timeout=3)
    if state.process_index == 1:
        time.sleep(6)  # never joins the collective
        os._exit(0)
    start = time.monotonic()
    try:
        ao.gather(torch.ones(3))
        print(json.dumps({"error": None}))
    except ao.CollectiveTimeoutError as error:
        print(json.dumps({"error": str(error), "seconds": time.monotonic() - start}))
    sys.stdout.flush()
    os._exit(0)  # the group is unusable now; don't wait on it at exit


def test_collective_that_never_completes_times_out_naming_the_op(tmp_path):
    results = run_workers(
        2, function=f"{__file__}::timeout_worker", env={"OUT": str(tmp_path)}, timeout=90
    )
    report = json.loads(results[0].stdout.strip().splitlines()[-1])
    assert report["error"] is not None
    assert report["error"].startswith(
        "gather failed on rank 0 of 2: the collective did not complete in 3 s."
    )
    assert 2.5 < report["seconds"] < 8


def test_plain_torchrun(tmp_path):
    import subprocess

    from accel_testing import free_port

    script = Path(__file__).with_name("torchrun_script.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={free_port()}",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # both workers share torchrun's stdout, so their lines can interleave: match, don't split
    reports = sorted(re.findall(r"torchrun-ok \d+ \d+ \[[\d, ]*\]", done.stdout))
    assert reports == ["torchrun-ok 0 2 [0, 1]", "torchrun-ok 1 2 [0, 1]"]
