"""The stand-in a process that does not run a tracker gets: same methods, doing nothing."""

from __future__ import annotations

import inspect

import pytest

from accel_core.tracking import (
    AimTracker,
    CometMLTracker,
    InactiveTracker,
    JSONLinesTracker,
    MLflowTracker,
    TensorBoardTracker,
    TrackioTracker,
    WandBTracker,
)
from accel_core.tracking.inactive import inactive_tracker

BUILT_IN = [
    AimTracker,
    CometMLTracker,
    JSONLinesTracker,
    MLflowTracker,
    TensorBoardTracker,
    TrackioTracker,
    WandBTracker,
]


def _public_methods(cls) -> set[str]:
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    }


@pytest.mark.parametrize("cls", BUILT_IN, ids=lambda cls: cls.name)
def test_inactive_tracker_has_the_same_methods_and_each_does_nothing(cls):
    stand_in = inactive_tracker(cls)
    assert isinstance(stand_in, InactiveTracker) and stand_in.name == cls.name
    methods = _public_methods(cls)
    assert {"start", "log", "store_init_configuration", "finish"} <= methods
    assert methods <= _public_methods(type(stand_in))
    for method in methods:
        assert getattr(stand_in, method)({"x": 1}, step=3, anything=True) is None
    assert stand_in.tracker is stand_in


def test_backend_specific_methods_are_there_too():
    wandb = inactive_tracker(WandBTracker)
    wandb.log_images({"samples": [object()]}, step=1)
    wandb.log_table("table", columns=["a"], data=[[1]])
    mlflow = inactive_tracker(MLflowTracker)
    mlflow.log_artifact("/nonexistent/file")
    mlflow.log_figure(object(), "figure.png")
    inactive_tracker(TensorBoardTracker).log_images({"x": object()})


def test_a_method_the_real_class_lacks_raises_alike():
    with pytest.raises(AttributeError):
        inactive_tracker(TensorBoardTracker).log_table("t")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        TensorBoardTracker("run", "dir").log_table  # type: ignore[attr-defined]  # noqa: B018
