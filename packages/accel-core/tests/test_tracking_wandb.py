"""Weights & Biases offline: read back from the run folder's ``.wandb`` transaction log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb", reason="the wandb extra is not installed")
sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import awkward_config, awkward_config_as_json, user_config, wandb_runs

from accel_core import Accelerator


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """init_kwargs for an offline run under tmp_path, with wandb's console capture off."""
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    return {"wandb": {"mode": "offline", "dir": str(tmp_path)}}


def test_config_and_history_read_back(offline, tmp_path):
    accelerator = Accelerator(log_with="wandb")
    config = awkward_config(tmp_path)
    accelerator.init_trackers("demo", config=config, init_kwargs=offline)
    accelerator.log({"loss": 0.5, "note": "warmup"}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    run = accelerator.get_tracker("wandb", unwrap=True)
    assert run is accelerator.get_tracker("wandb").run and run.offline
    accelerator.end_training()

    (written,) = wandb_runs(tmp_path)
    assert written["run_id"] == run.id and written["project"] == "demo"
    assert user_config(written["config"]) == awkward_config_as_json(tmp_path)
    assert [(row["_step"], row["loss"]) for row in written["history"]] == [(1, 0.5), (2, 0.25)]
    assert written["history"][0]["note"] == "warmup"
    assert written["exit_code"] == 0


def test_a_failed_run_exits_with_code_1(offline, tmp_path):
    accelerator = Accelerator(log_with="wandb")
    accelerator.init_trackers("demo", init_kwargs=offline)
    accelerator.get_tracker("wandb").fail(RuntimeError("diverged"))
    accelerator.end_training()
    assert [run["exit_code"] for run in wandb_runs(tmp_path)] == [1]


def _first_attempt(offline) -> tuple[dict, str]:
    accelerator = Accelerator(log_with="wandb")
    accelerator.init_trackers("demo", config={"lr": 0.1}, init_kwargs=offline)
    accelerator.log({"loss": 1.0}, step=1)
    state = json.loads(json.dumps(accelerator._tracking_state()))
    run_id = accelerator.get_tracker("wandb").run.id
    accelerator.end_training()
    assert state == {"wandb": {"run_id": run_id, "project": "demo"}}
    return state, run_id


def test_resume_before_init_continues_the_same_run_id(offline, tmp_path):
    state, run_id = _first_attempt(offline)
    accelerator = Accelerator(log_with="wandb")
    accelerator._resume_tracking(state)
    accelerator.init_trackers("demo", init_kwargs=offline)
    accelerator.log({"loss": 0.5}, step=2)
    accelerator.end_training()
    first, second = wandb_runs(tmp_path)
    assert first["run_id"] == second["run_id"] == run_id
    assert [(row["_step"], row["loss"]) for row in second["history"]] == [(2, 0.5)]


def test_resume_after_init_removes_the_empty_offline_run(offline, tmp_path):
    state, run_id = _first_attempt(offline)
    accelerator = Accelerator(log_with="wandb")
    accelerator.init_trackers("demo", config={"lr": 0.1}, init_kwargs=offline)
    empty = accelerator.get_tracker("wandb").run.id
    accelerator._resume_tracking(state)
    accelerator.log({"loss": 0.5}, step=2)
    accelerator.end_training()
    runs = wandb_runs(tmp_path)
    assert empty not in [run["run_id"] for run in runs]
    assert [run["run_id"] for run in runs] == [run_id, run_id]
    assert user_config(runs[1]["config"]) == {"lr": 0.1}
    assert [(row["_step"], row["loss"]) for row in runs[1]["history"]] == [(2, 0.5)]
