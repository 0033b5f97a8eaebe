"""A run that ends by an uncaught exception is marked failed, under ``python script.py`` and
under ``accel launch``'s worker bootstrap (which runs the atexit handlers itself, then
``os._exit``). This file is also the script: run as ``__main__`` it crashes after logging."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

BACKENDS = ("mlflow", "wandb", "tensorboard")


def crash() -> None:
    """Start every installed tracker, log once, save the run ids, then fail."""
    import importlib.util

    from accel_core import Accelerator

    out = Path(os.environ["OUT"])
    installed = [name for name in BACKENDS if importlib.util.find_spec(name) is not None]
    accelerator = Accelerator(log_with=["jsonl", *installed], project_dir=out)
    accelerator.init_trackers(
        "demo",
        config={"lr": 0.1},
        init_kwargs={
            "mlflow": {"tracking_uri": f"sqlite:///{out / 'mlflow.db'}"},
            "wandb": {"mode": "offline", "dir": str(out)},
        },
    )
    accelerator.log({"loss": 1.0}, step=1)
    (out / "state.json").write_text(json.dumps(accelerator._tracking_state()))
    raise RuntimeError("diverged at step 1")


MODES = {"python-script": False, "accel-launch-worker": True}  # mode -> run_workers(bootstrap=)


def _crash(out: Path, bootstrap: bool):
    env = {
        "OUT": str(out),
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
    }
    (result,) = run_workers(
        1, script=__file__, env=env, bootstrap=bootstrap, check=False, timeout=120
    )
    return out, result


@pytest.fixture(scope="module")
def crashes(tmp_path_factory):
    """Both crashes, started at the same time (each process mostly waits on imports)."""
    with ThreadPoolExecutor(len(MODES)) as pool:
        futures = {
            mode: pool.submit(_crash, tmp_path_factory.mktemp(mode), bootstrap)
            for mode, bootstrap in MODES.items()
        }
        return {mode: future.result() for mode, future in futures.items()}


@pytest.fixture(params=list(MODES))
def crashed(request, crashes):
    out, result = crashes[request.param]
    return out, result, json.loads((out / "state.json").read_text())


def test_the_process_fails_with_the_traceback(crashed):
    _, result, _ = crashed
    assert result.returncode == 1
    assert "RuntimeError: diverged at step 1" in result.stderr


def test_jsonl_run_is_failed_with_the_error(crashed):
    from tracking_readers import jsonl_run

    _, _, state = crashed
    meta = jsonl_run(state["jsonl"]["run_file"])[1]
    assert (meta["status"], meta["error"]) == ("failed", "RuntimeError: diverged at step 1")


def test_mlflow_run_status_is_failed(crashed):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    from mlflow import MlflowClient

    out, _, state = crashed
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    run = client.get_run(state["mlflow"]["run_id"])
    assert run.info.status == "FAILED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [
        (1, 1.0)
    ]


def test_wandb_run_exit_code_is_1(crashed):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    from tracking_readers import wandb_runs

    out, _, state = crashed
    (run,) = wandb_runs(out)
    assert run["run_id"] == state["wandb"]["run_id"]
    assert run["exit_code"] == 1 and run["history"][0]["loss"] == 1.0


def test_tensorboard_hparams_session_is_failed(crashed):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tracking_readers import tensorboard_run

    out, _, _ = crashed
    run = tensorboard_run(out / "demo")
    assert run["status"] == "STATUS_FAILURE" and run["scalars"]["loss"] == [(1, 1.0)]


if __name__ == "__main__":
    crash()
