"""TensorBoard: read back through tensorboard's EventAccumulator and the hparams plugin."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import tensorboard_run

from accel_core import Accelerator, LoggerType

CONFIG = {
    "lr": 0.001,
    "epochs": 3,
    "use_amp": True,
    "layers": [64, 32],
    "optimizer": {"name": "adamw", "betas": (0.9, 0.999), "schedule": None},
    "data": Path("/datasets/digits"),
    "logger": LoggerType.TENSORBOARD,
    "nothing": None,
}


def test_config_of_any_shape_becomes_hparams_and_metrics_read_back(tmp_path):
    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path)
    accelerator.init_trackers("demo", config=CONFIG)
    accelerator.log({"loss": 0.5, "note": "warmup", "acc": {"train": 0.25, "val": 0.125}}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    assert accelerator.get_tracker("tensorboard", unwrap=True) is (
        accelerator.get_tracker("tensorboard").writer
    )
    accelerator.end_training()

    run = tensorboard_run(tmp_path / "demo")
    assert run["scalars"]["loss"] == [(1, 0.5), (2, 0.25)]
    assert run["text"]["note/text_summary"] == [(1, "warmup")]
    assert tensorboard_run(tmp_path / "demo" / "acc_train")["scalars"]["acc"] == [(1, 0.25)]
    assert run["hparams"] == {
        "lr": 0.001,
        "epochs": 3.0,
        "use_amp": 1.0,
        "layers": "[64, 32]",
        "optimizer.name": "adamw",
        "optimizer.betas": "[0.9, 0.999]",
        "optimizer.schedule": "None",
        "data": "/datasets/digits",
        "logger": "tensorboard",
        "nothing": "None",
    }
    assert run["status"] == "STATUS_SUCCESS"
    saved = json.loads((tmp_path / "demo" / "hparams.json").read_text())
    assert saved["optimizer"] == {"name": "adamw", "betas": [0.9, 0.999], "schedule": None}


def test_a_failed_run_ends_its_hparams_session_with_failure(tmp_path):
    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path)
    accelerator.init_trackers("demo", config={"lr": 1})
    accelerator.get_tracker("tensorboard").fail(RuntimeError("diverged"))
    assert tensorboard_run(tmp_path / "demo")["status"] == "STATUS_FAILURE"
    accelerator.end_training()


def _first_attempt(tmp_path) -> dict:
    """Steps 0-4 logged, a checkpoint taken after step 2; returns the checkpoint's state."""
    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path)
    accelerator.init_trackers("demo")
    state = None
    for step in range(5):
        accelerator.log({"loss": float(step)}, step=step)
        if step == 2:
            state = json.loads(json.dumps(accelerator._tracking_state()))
    accelerator.end_training()
    assert state == {"tensorboard": {"log_dir": str(tmp_path / "demo"), "step": 2}}
    return state


def test_resume_before_init_purges_steps_after_the_checkpoint(tmp_path):
    state = _first_attempt(tmp_path)
    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path)
    accelerator._resume_tracking(state)
    accelerator.init_trackers("demo")
    for step in (3, 4, 5):
        accelerator.log({"loss": 10.0 + step}, step=step)
    accelerator.end_training()
    assert tensorboard_run(tmp_path / "demo")["scalars"]["loss"] == [
        (0, 0.0),
        (1, 1.0),
        (2, 2.0),
        (3, 13.0),
        (4, 14.0),
        (5, 15.0),
    ]


def test_resume_after_init_reopens_the_saved_folder(tmp_path):
    state = _first_attempt(tmp_path)
    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path / "elsewhere")
    accelerator.init_trackers("demo", config={"lr": 2})
    empty_folder = tmp_path / "elsewhere" / "demo"
    accelerator._resume_tracking(state)
    accelerator.log({"loss": 13.0}, step=3)
    accelerator.end_training()
    run = tensorboard_run(tmp_path / "demo")
    assert run["scalars"]["loss"] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 13.0)]
    assert run["hparams"] == {"lr": 2.0}
    assert not empty_folder.exists()  # the empty run it had started is gone
