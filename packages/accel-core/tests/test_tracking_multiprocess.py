"""Trackers on 2 and 3 real gloo processes: ``log(reduce=...)`` and what other ranks get.

One worker run per process count does every check (starting processes is the slow part) and
writes what each rank saw to a file; the tests compare that with the expected values. The
workers end without ``end_training``: the exit handler closes the runs as finished.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import jsonl_run

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


# --------------------------------------------------------------------------------------------
# worker side


def _public_methods(cls: type) -> list[str]:
    return sorted(
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    )


def worker() -> None:
    from accel_core import Accelerator
    from accel_core.tracking import TensorBoardTracker

    out = Path(os.environ["OUT"])
    rank = int(os.environ["RANK"])
    accelerator = Accelerator(log_with=["jsonl", "tensorboard"], project_dir=out)
    accelerator.init_trackers("demo")
    value = float(rank + 1)
    accelerator.log(
        {"loss": value, "count": rank + 1, "name": f"rank{rank}", "group": {"a": -value}},
        step=1,
        reduce="mean",
    )
    for step, reduction in ((2, "sum"), (3, "max"), (4, "min")):
        accelerator.log({"loss": value, "count": rank + 1}, step=step, reduce=reduction)
    accelerator.log({"loss": value}, step=5)  # no reduce: only the main process writes
    mismatched = {"loss": value} if rank == 0 else {"loss": value, "extra": 1.0}
    try:
        accelerator.log(mismatched, step=6, reduce="mean")
        error = None
    except ValueError as problem:
        error = str(problem)
    report: dict = {"error": error, "trackers": [t.name for t in accelerator.trackers]}
    stand_in = accelerator.get_tracker("tensorboard")
    report["type"] = type(stand_in).__name__
    report["methods"] = _public_methods(type(stand_in))
    report["expected_methods"] = _public_methods(TensorBoardTracker)
    if rank != 0:
        report["calls"] = [
            stand_in.log({"x": 1.0}, step=1),
            stand_in.log_images({"images": object()}, step=1),
            stand_in.store_init_configuration({"lr": 1}),
            stand_in.finish(),
        ]
        unwrapped = accelerator.get_tracker("tensorboard", unwrap=True)
        report["unwrap_is_stand_in"] = unwrapped is stand_in
    report["state"] = accelerator._tracking_state()
    (out / f"rank{rank}.json").write_text(json.dumps(report))


# --------------------------------------------------------------------------------------------
# test side


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}procs")
def run(request, tmp_path_factory):
    world = request.param
    out = tmp_path_factory.mktemp(f"tracking{world}")
    run_workers(world, function=f"{__file__}::worker", env={"OUT": str(out)}, timeout=180)
    reports = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]
    return world, out, reports


def test_main_process_writes_the_reduced_values(run):
    world, out, reports = run
    mean = sum(range(1, world + 1)) / world
    (run_file,) = (out / "demo").glob("*.jsonl")
    records, meta = jsonl_run(run_file)
    assert [(r["step"], r["values"]) for r in records] == [
        (1, {"loss": mean, "count": mean, "name": "rank0", "group": {"a": -mean}}),
        (2, {"loss": float(sum(range(1, world + 1))), "count": sum(range(1, world + 1))}),
        (3, {"loss": float(world), "count": world}),
        (4, {"loss": 1.0, "count": 1}),
        (5, {"loss": 1.0}),
    ]
    assert meta["status"] == "finished"  # closed by the exit handler
    assert reports[0]["state"]["jsonl"] == {"run_file": str(run_file), "step": 5}


def test_mismatched_keys_raise_on_every_process(run):
    _, _, reports = run
    for rank, report in enumerate(reports):
        assert "same numeric keys on every process" in report["error"]
        assert f"this process has {1 if rank == 0 else 2}" in report["error"]


def test_other_ranks_get_inactive_trackers_with_the_same_methods(run):
    _, _, reports = run
    assert reports[0]["trackers"] == ["jsonl", "tensorboard"]
    assert reports[0]["type"] == "TensorBoardTracker"
    for report in reports[1:]:
        assert report["trackers"] == [] and report["state"] == {}
        assert report["type"] == "InactiveTensorBoardTracker"
        assert report["methods"] == report["expected_methods"]
        assert {"log", "log_images", "store_init_configuration", "finish"} <= set(report["methods"])
        assert report["calls"] == [None, None, None, None]
        assert report["unwrap_is_stand_in"] is True
