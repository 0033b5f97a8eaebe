"""Aim: read back through aim's Repo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("aim", reason="the aim extra is not installed")
sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import aim_run, awkward_config, awkward_config_as_json

from accel_core import Accelerator

QUIET = {"aim": {"system_tracking_interval": None, "capture_terminal_logs": False}}


def test_hparams_and_metrics_read_back_and_resume_continues_the_run(tmp_path):
    accelerator = Accelerator(log_with="aim", project_dir=tmp_path)
    config = awkward_config(tmp_path)
    accelerator.init_trackers("demo", config=config, init_kwargs=QUIET)
    accelerator.log({"loss": 0.5}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    state = json.loads(json.dumps(accelerator._tracking_state()))
    run_hash = accelerator.get_tracker("aim", unwrap=True).hash
    accelerator.end_training()
    assert state == {"aim": {"run_hash": run_hash, "repo": str(tmp_path)}}

    resumed = Accelerator(log_with="aim", project_dir=tmp_path)
    resumed._resume_tracking(state)
    resumed.init_trackers("demo", init_kwargs=QUIET)
    assert resumed.get_tracker("aim", unwrap=True).hash == run_hash
    resumed.log({"loss": 0.125}, step=3)
    resumed.end_training()

    run = aim_run(tmp_path, run_hash)
    assert run["name"] == "demo"
    assert run["hparams"] == awkward_config_as_json(tmp_path)
    assert run["metrics"]["loss"] == [(1, 0.5), (2, 0.25), (3, 0.125)]
