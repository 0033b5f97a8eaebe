"""The JSON-lines tracker through the Accelerator: records, config, status, resume both ways."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import jsonl_run

from accel_core import Accelerator


def _roundtrip(state: dict) -> dict:
    """What a checkpoint gives back: the state through JSON."""
    return json.loads(json.dumps(state))


def test_each_log_call_is_one_line_with_step_time_and_values(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    config = {
        "lr": 0.1,
        "sizes": [8, 16],
        "optim": {"name": "adam"},
        "none": None,
        "path": tmp_path / "data",
    }
    accelerator.init_trackers("demo", config=config)
    accelerator.log({"loss": torch.tensor(0.5), "note": "warmup", "nan": math.nan}, step=1)
    accelerator.log({"loss": 0.25, "acc": {"top1": 0.75}})
    tracker = accelerator.get_tracker("jsonl")
    run_file = tracker.run_file
    accelerator.end_training()

    assert run_file.parent == tmp_path / "demo" and run_file.suffix == ".jsonl"
    assert accelerator.get_tracker("jsonl", unwrap=True) == run_file
    records, meta = jsonl_run(run_file)
    assert [r["step"] for r in records] == [1, None]
    assert records[0]["values"]["loss"] == 0.5 and records[0]["values"]["note"] == "warmup"
    assert math.isnan(records[0]["values"]["nan"])
    assert records[1]["values"] == {"loss": 0.25, "acc": {"top1": 0.75}}
    assert records[0]["time"] <= records[1]["time"]
    assert meta["config"] == {
        "lr": 0.1,
        "sizes": [8, 16],
        "optim": {"name": "adam"},
        "none": None,
        "path": str(tmp_path / "data"),
    }
    assert meta["status"] == "finished" and meta["project"] == "demo"
    assert meta["run_id"] == run_file.stem and meta["resumes"] == []


def test_end_training_twice_finishes_once(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    accelerator.init_trackers("demo")
    tracker = accelerator.get_tracker("jsonl")
    accelerator.end_training()
    ended = jsonl_run(tracker.run_file)[1]["ended"]
    accelerator.end_training()
    assert jsonl_run(tracker.run_file)[1]["ended"] == ended


def test_resume_after_load_then_init_appends_to_the_saved_file(tmp_path):
    first = Accelerator(log_with="jsonl", project_dir=tmp_path)
    first.init_trackers("demo", config={"lr": 0.1})
    for step in range(3):
        first.log({"loss": 1.0 - step / 10}, step=step)
    state = _roundtrip(first._tracking_state())
    run_file = first.get_tracker("jsonl").run_file
    first.log({"loss": 0.0}, step=3)  # after the checkpoint; the run then crashes
    first.end_training()
    assert state == {"jsonl": {"run_file": str(run_file), "step": 2}}

    second = Accelerator(log_with="jsonl", project_dir=tmp_path)
    second._resume_tracking(state)  # load_state before init_trackers
    second.init_trackers("demo", config={"lr": 0.1})
    assert second.get_tracker("jsonl").run_file == run_file
    second.log({"loss": 0.7}, step=3)
    second.end_training()

    records, meta = jsonl_run(run_file)
    assert [(r["step"], r["values"]["loss"]) for r in records] == [
        (0, 1.0),
        (1, 0.9),
        (2, 0.8),
        (3, 0.0),
        (3, 0.7),
    ]
    assert [entry["step"] for entry in meta["resumes"]] == [2]
    assert meta["config"] == {"lr": 0.1} and meta["status"] == "finished"
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == [
        run_file.name,
        run_file.stem + ".run.json",
    ]


def test_resume_after_init_switches_and_removes_the_empty_run(tmp_path):
    first = Accelerator(log_with="jsonl", project_dir=tmp_path)
    first.init_trackers("demo")
    first.log({"loss": 1.0}, step=0)
    state = _roundtrip(first._tracking_state())
    saved = first.get_tracker("jsonl").run_file
    first.end_training()

    second = Accelerator(log_with="jsonl", project_dir=tmp_path)
    second.init_trackers("demo", config={"lr": 0.2})
    fresh = second.get_tracker("jsonl").run_file
    assert fresh != saved and fresh.exists()
    second._resume_tracking(state)  # load_state after init_trackers
    assert not fresh.exists() and not fresh.with_name(fresh.stem + ".run.json").exists()
    second.log({"loss": 0.5}, step=1)
    assert second._tracking_state() == {"jsonl": {"run_file": str(saved), "step": 1}}
    second.end_training()

    records, meta = jsonl_run(saved)
    assert [(r["step"], r["values"]["loss"]) for r in records] == [(0, 1.0), (1, 0.5)]
    assert meta["config"] == {"lr": 0.2}  # stored again into the resumed run


def test_resume_after_init_keeps_a_run_that_has_records(tmp_path):
    first = Accelerator(log_with="jsonl", project_dir=tmp_path)
    first.init_trackers("demo")
    state = _roundtrip(first._tracking_state())
    saved = first.get_tracker("jsonl").run_file
    first.end_training()

    second = Accelerator(log_with="jsonl", project_dir=tmp_path)
    second.init_trackers("demo")
    second.log({"loss": 3.0}, step=0)
    current = second.get_tracker("jsonl").run_file
    second._resume_tracking(state)
    second.end_training()
    assert jsonl_run(current)[1]["status"] == "finished"
    assert [r["values"] for r in jsonl_run(current)[0]] == [{"loss": 3.0}]
    assert jsonl_run(saved)[0] == []


def test_state_after_end_training_still_names_the_run(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    accelerator.init_trackers("demo")
    accelerator.log({"x": 1}, step=5)
    run_file = accelerator.get_tracker("jsonl").run_file
    accelerator.end_training()
    assert accelerator._tracking_state() == {"jsonl": {"run_file": str(run_file), "step": 5}}


def test_log_takes_no_keyword_arguments(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    accelerator.init_trackers("demo")
    with pytest.raises(TypeError, match="no keyword arguments"):
        accelerator.log({"x": 1}, log_kwargs={"jsonl": {"commit": True}})
    accelerator.end_training()


def test_save_state_and_load_state_carry_the_run_both_ways(tmp_path):
    first = Accelerator(log_with="jsonl", project_dir=tmp_path)
    first.init_trackers("demo")
    first.log({"loss": 1.0}, step=0)
    run_file = first.get_tracker("jsonl").run_file
    first.save_state(tmp_path / "checkpoint")
    first.end_training()

    load_first = Accelerator(log_with="jsonl", project_dir=tmp_path)
    load_first.load_state(tmp_path / "checkpoint")
    load_first.init_trackers("demo")
    load_first.log({"loss": 0.5}, step=1)
    load_first.end_training()

    init_first = Accelerator(log_with="jsonl", project_dir=tmp_path)
    init_first.init_trackers("demo")
    init_first.load_state(tmp_path / "checkpoint")
    init_first.log({"loss": 0.25}, step=1)
    init_first.end_training()

    records, meta = jsonl_run(run_file)
    assert [(r["step"], r["values"]["loss"]) for r in records] == [(0, 1.0), (1, 0.5), (1, 0.25)]
    assert [entry["step"] for entry in meta["resumes"]] == [0, 0]
    assert list((tmp_path / "demo").glob("*.jsonl")) == [run_file]
