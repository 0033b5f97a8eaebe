"""MLflow on a local SQLite store: read back through MlflowClient."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage

from accel_core import Accelerator


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite tracking store for the module (creating one takes about a second); MLflow's
    global tracking URI is restored afterwards. Each test uses its own experiment."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    yield f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    mlflow.set_tracking_uri(previous)


def _accelerator(store, **init):
    accelerator = Accelerator(log_with="mlflow")
    return accelerator, {"mlflow": {"tracking_uri": store, **init}}


def _history(client, run_id, key):
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def test_params_metrics_and_status_read_back(store, tmp_path):
    accelerator, init_kwargs = _accelerator(store, run_name="first")
    config = {
        "lr": 0.1,
        "layers": [2, 4],
        "optim": {"name": "sgd"},
        "none": None,
        "path": tmp_path / "data",
    }
    accelerator.init_trackers("read-back", config=config, init_kwargs=init_kwargs)
    with pytest.warns(UserWarning, match="'note' is a str"):
        accelerator.log({"loss": 0.5, "note": "text", "acc": {"top1": 0.75}}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    run_id = accelerator.get_tracker("mlflow").run_id
    assert accelerator.get_tracker("mlflow", unwrap=True).info.run_id == run_id
    accelerator.end_training()

    client = MlflowClient(tracking_uri=store)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert client.get_experiment(run.info.experiment_id).name == "read-back"
    assert run.data.params == {
        "lr": "0.1",
        "layers": "[2, 4]",
        "optim.name": "sgd",
        "none": "None",
        "path": str(tmp_path / "data"),
    }
    assert _history(client, run_id, "loss") == [(1, 0.5), (2, 0.25)]
    assert _history(client, run_id, "acc/top1") == [(1, 0.75)]
    assert "note" not in run.data.metrics


def test_a_failed_run_is_marked_failed(store):
    accelerator, init_kwargs = _accelerator(store)
    accelerator.init_trackers("failed", init_kwargs=init_kwargs)
    tracker = accelerator.get_tracker("mlflow")
    tracker.fail(ValueError("diverged"))
    assert MlflowClient(tracking_uri=store).get_run(tracker.run_id).info.status == "FAILED"
    accelerator.end_training()


def _first_attempt(store, experiment) -> tuple[dict, str]:
    accelerator, init_kwargs = _accelerator(store)
    accelerator.init_trackers(experiment, config={"lr": 0.1}, init_kwargs=init_kwargs)
    for step in range(3):
        accelerator.log({"loss": float(step)}, step=step)
    state = json.loads(json.dumps(accelerator._tracking_state()))
    run_id = accelerator.get_tracker("mlflow").run_id
    accelerator.end_training()
    assert state == {"mlflow": {"run_id": run_id, "tracking_uri": store}}
    return state, run_id


def test_resume_before_init_continues_the_same_run(store):
    state, run_id = _first_attempt(store, "resume-before")
    accelerator = Accelerator(log_with="mlflow")
    accelerator._resume_tracking(state)
    accelerator.init_trackers("resume-before", config={"lr": 0.1})  # the saved tracking URI is used
    accelerator.log({"loss": 3.0}, step=3)
    assert accelerator.get_tracker("mlflow").run_id == run_id
    accelerator.end_training()
    client = MlflowClient(tracking_uri=store)
    assert _history(client, run_id, "loss") == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)]
    assert client.get_run(run_id).info.status == "FINISHED"
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1


def test_resume_after_init_deletes_the_empty_run_and_keeps_params(store):
    state, run_id = _first_attempt(store, "resume-after")
    accelerator, init_kwargs = _accelerator(store)
    accelerator.init_trackers("resume-after", config={"lr": 0.2}, init_kwargs=init_kwargs)
    empty = accelerator.get_tracker("mlflow").run_id
    with pytest.warns(UserWarning, match="already has param 'lr'='0.1'"):
        accelerator._resume_tracking(state)
    accelerator.log({"loss": 3.0}, step=3)
    accelerator.end_training()

    client = MlflowClient(tracking_uri=store)
    assert client.get_run(empty).info.lifecycle_stage == LifecycleStage.DELETED
    assert _history(client, run_id, "loss")[-1] == (3, 3.0)
    assert client.get_run(run_id).data.params == {"lr": "0.1"}
