"""Comet offline: read back from the offline archive (experiment.json, messages.json)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# Importing comet_ml patches mlflow, tensorboard and others to create Comet experiments of their
# own (in ./.cometml-runs when offline); the other tracker tests run in this process too.
os.environ["COMET_DISABLE_AUTO_LOGGING"] = "1"
pytest.importorskip("comet_ml", reason="the comet extra is not installed")
sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import comet_archives

from accel_core import Accelerator

_QUIET = {
    "log_code": False,
    "log_git_metadata": False,
    "log_git_patch": False,
    "log_env_details": False,
    "log_env_gpu": False,
    "log_env_host": False,
    "log_env_cpu": False,
    "auto_output_logging": False,
    "display_summary_level": 0,
}


def _offline(folder: Path) -> dict:
    return {
        "comet_ml": {
            "online": False,
            "experiment_config": {"offline_directory": str(folder), **_QUIET},
        }
    }


def _messages(archive: dict, kind: str) -> list[dict]:
    return [m["payload"] for m in archive["messages"] if m["type"] == kind]


def test_parameters_metrics_and_resume_read_back(tmp_path):
    accelerator = Accelerator(log_with="comet_ml")
    config = {"lr": 0.1, "optim": {"name": "adam"}, "none": None, "path": tmp_path / "data"}
    accelerator.init_trackers("demo", config=config, init_kwargs=_offline(tmp_path))
    accelerator.log({"loss": 0.5, "note": "warmup"}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    state = json.loads(json.dumps(accelerator._tracking_state()))
    key = accelerator.get_tracker("comet_ml", unwrap=True).get_key()
    accelerator.end_training()
    assert state == {"comet_ml": {"experiment_key": key}}

    resumed = Accelerator(log_with="comet_ml")
    resumed._resume_tracking(state)
    resumed.init_trackers("demo", init_kwargs=_offline(tmp_path))
    resumed.log({"loss": 0.125}, step=3)
    resumed.end_training()

    archives = comet_archives(tmp_path)
    assert sorted(a["experiment"]["resume_strategy"] for a in archives) == ["get", "get_or_create"]
    (first,) = [a for a in archives if a["experiment"]["resume_strategy"] == "get_or_create"]
    (second,) = [a for a in archives if a["experiment"]["resume_strategy"] == "get"]
    assert first["experiment"]["project_name"] == "demo"
    assert first["experiment"]["offline_id"] == second["experiment"]["offline_id"] == key
    params = {}
    for payload in _messages(first, "parameter_msg"):
        param = payload.get("param") or payload["params"]
        params[param["paramName"]] = param["paramValue"]
    assert {k: params[k] for k in ("lr", "optim|name", "none", "path")} == {
        "lr": 0.1,
        "optim|name": "adam",
        "none": None,
        "path": str(tmp_path / "data"),
    }
    metrics = [
        (m["metric"]["step"], m["metric"]["metricValue"])
        for archive in (first, second)
        for m in _messages(archive, "metric_msg")
        if m["metric"]["metricName"] == "loss"
    ]
    assert metrics == [(1, 0.5), (2, 0.25), (3, 0.125)]
    others = {m["key"]: m["value"] for m in _messages(first, "log_other")}
    assert others["note"] == "warmup"
