"""Trackio: read back through trackio's local SQLite store."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

if importlib.util.find_spec("trackio") is None:  # not importorskip: trackio must not load yet
    pytest.skip("the trackio extra is not installed", allow_module_level=True)

from accel_core import Accelerator

QUIET = {"trackio": {"auto_log_cpu": False, "auto_log_gpu": False, "embed": False}}


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """trackio's store, in a temporary TRACKIO_DIR (read once, when trackio is imported)."""
    if "trackio" not in sys.modules:
        os.environ["TRACKIO_DIR"] = str(tmp_path_factory.mktemp("trackio"))
    from trackio.sqlite_storage import SQLiteStorage

    return SQLiteStorage


def test_config_logs_alert_and_resume_read_back(storage, tmp_path):
    accelerator = Accelerator(log_with="trackio")
    config = {"lr": 0.1, "optim": {"name": "adam"}, "none": None, "path": tmp_path / "data"}
    accelerator.init_trackers("accel-trackio-test", config=config, init_kwargs=QUIET)
    accelerator.log({"loss": 0.5}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    state = json.loads(json.dumps(accelerator._tracking_state()))
    name = accelerator.get_tracker("trackio", unwrap=True).name
    accelerator.end_training()
    assert state == {"trackio": {"run_name": name, "project": "accel-trackio-test"}}

    resumed = Accelerator(log_with="trackio")
    resumed.init_trackers("accel-trackio-test", init_kwargs=QUIET)
    empty = resumed.get_tracker("trackio", unwrap=True).name
    resumed._resume_tracking(state)  # load_state after init_trackers
    resumed.log({"loss": 0.125}, step=3)
    resumed.get_tracker("trackio").fail(RuntimeError("diverged"))
    resumed.end_training()

    assert storage.get_runs("accel-trackio-test") == [name]  # the empty run was deleted
    assert empty != name
    logs = storage.get_logs("accel-trackio-test", name)
    assert [(row["step"], row["loss"]) for row in logs] == [(1, 0.5), (2, 0.25), (3, 0.125)]
    saved = storage.get_run_config("accel-trackio-test", name)
    assert {key: saved[key] for key in config} == {
        "lr": 0.1,
        "optim": {"name": "adam"},
        "none": None,
        "path": str(tmp_path / "data"),
    }
    alerts = storage.get_alerts("accel-trackio-test", run_name=name)
    assert [(a["title"], a["level"], a["text"]) for a in alerts] == [
        ("run failed", "error", "RuntimeError: diverged")
    ]
