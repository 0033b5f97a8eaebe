"""The ClearML, DVCLive and SwanLab trackers, and LOGGER_TYPE_TO_CLASS.

Their backends are not among the test dependencies: the trackers run here against small stand-in
modules that record the calls (the real packages were checked by hand with the same scripts; the
tests at the end run them when a backend is installed).
"""

from __future__ import annotations

import importlib.machinery
import json
import logging
import sys
import types

import pytest

from accel_core import Accelerator
from accel_core.tracking import (
    LOGGER_TYPE_TO_CLASS,
    ClearMLTracker,
    DVCLiveTracker,
    GeneralTracker,
    SwanLabTracker,
    TrackerNotInstalledError,
    register_tracker_class,
    registry,
    unregister_tracker_class,
)


def _module(name: str, **attributes: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    vars(module).update(attributes)
    return module


class Recorder:
    """Records every call made on it or on the objects it hands out."""

    def __init__(self, calls: list, name: str) -> None:
        self._calls, self._name = calls, name

    def __getattr__(self, attribute: str):
        def record(*args, **kwargs):
            self._calls.append((f"{self._name}.{attribute}", args, kwargs))
            return Recorder(self._calls, f"{self._name}.{attribute}()")

        return record


@pytest.fixture
def calls() -> list:
    return []


@pytest.fixture
def fake_clearml(monkeypatch, calls):
    class Task:
        current = None

        @staticmethod
        def current_task():
            return Task.current

        @staticmethod
        def init(**kwargs):
            calls.append(("Task.init", (), kwargs))
            return Recorder(calls, "task")

    monkeypatch.setitem(sys.modules, "clearml", _module("clearml", Task=Task))
    return Task


@pytest.fixture
def fake_dvclive(monkeypatch, calls):
    class Metric:
        @staticmethod
        def could_log(value: object) -> bool:
            return isinstance(value, (int, float, str))

    class Live(Recorder):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(calls, "live")
            calls.append(("Live", (), kwargs))

        def __setattr__(self, name: str, value: object) -> None:
            if name == "step":
                calls.append(("live.step =", (value,), {}))
            object.__setattr__(self, name, value)

    plots = _module("dvclive.plots", Metric=Metric)
    monkeypatch.setitem(sys.modules, "dvclive", _module("dvclive", Live=Live, plots=plots))
    monkeypatch.setitem(sys.modules, "dvclive.plots", plots)


@pytest.fixture
def fake_swanlab(monkeypatch, calls):
    def init(**kwargs: object) -> Recorder:
        calls.append(("swanlab.init", (), kwargs))
        return Recorder(calls, "run")

    config = Recorder(calls, "swanlab.config")
    monkeypatch.setitem(sys.modules, "swanlab", _module("swanlab", init=init, config=config))


def test_clearml_task_names_scalars_series_and_dropped_values(fake_clearml, calls, caplog):
    accelerator = Accelerator(cpu=True, log_with="clearml")
    accelerator.init_trackers("proj", config={"lr": 0.1, "path": {"a": 1}})
    with caplog.at_level(logging.WARNING, logger="accel_core.tracking.clearml_tracker"):
        accelerator.log({"eval_loss": 1.5, "acc": 0.5, "note": "x"}, step=3)
        accelerator.log({"note": "y", "final": 2}, step=None)
    accelerator.end_training()
    logged = [(name, kwargs) for name, _, kwargs in calls]
    assert logged == [
        ("Task.init", {"project_name": "proj", "task_name": "proj"}),
        ("task.connect_configuration", {}),
        ("task.get_logger", {}),
        (
            "task.get_logger().report_scalar",
            {"title": "loss", "series": "eval", "value": 1.5, "iteration": 3},
        ),
        (
            "task.get_logger().report_scalar",
            {"title": "acc", "series": "train", "value": 0.5, "iteration": 3},
        ),
        ("task.get_logger", {}),
        ("task.get_logger().report_single_value", {"name": "final", "value": 2}),
        ("task.close", {}),
    ]
    assert calls[1][1] == ({"lr": 0.1, "path": {"a": 1}},)
    assert caplog.text.count("'note'") == 1  # one warning per key


def test_clearml_environment_names_and_a_task_started_by_the_script(
    fake_clearml, calls, monkeypatch
):
    monkeypatch.setenv("CLEARML_PROJECT", "from-env")
    tracker = ClearMLTracker("proj", tags=["a"])
    tracker.start()
    assert calls[0][2] == {"tags": ["a"], "project_name": "from-env", "task_name": "proj"}
    calls.clear()
    fake_clearml.current = Recorder(calls, "external")
    tracker = ClearMLTracker("proj")
    tracker.start()
    tracker.finish()
    assert calls == [] and tracker.tracker is fake_clearml.current  # not closed by us


def test_dvclive_live_params_steps_and_an_existing_live(fake_dvclive, calls):
    accelerator = Accelerator(cpu=True, log_with="dvclive")
    accelerator.init_trackers("ignored", config={"lr": 0.1}, init_kwargs={"dvclive": {"dir": "d"}})
    accelerator.log({"loss": 1.5, "bad": [1, 2]}, step=3)
    accelerator.end_training()
    assert [(name, args) for name, args, _ in calls] == [
        ("Live", ()),
        ("live.log_params", ({"lr": 0.1},)),
        ("live.step =", (3,)),
        ("live.log_metric", ("loss", 1.5)),
        ("live.next_step", ()),
        ("live.end", ()),
    ]
    assert calls[0][2] == {"dir": "d"}
    given = Recorder(calls, "given")
    tracker = DVCLiveTracker(live=given)
    tracker.start()
    assert tracker.tracker is given


def test_swanlab_run(fake_swanlab, calls):
    accelerator = Accelerator(cpu=True, log_with="swanlab")
    accelerator.init_trackers(
        "proj", config={"lr": 0.1}, init_kwargs={"swanlab": {"mode": "local"}}
    )
    accelerator.log({"loss": 1.5}, step=2)
    accelerator.end_training()
    assert calls == [
        ("swanlab.init", (), {"project": "proj", "mode": "local"}),
        ("swanlab.config.update", ({"lr": 0.1},), {}),
        ("run.log", ({"loss": 1.5},), {"step": 2}),
        ("run.finish", (), {}),
    ]


@pytest.mark.parametrize("name", ["clearml", "dvclive", "swanlab"])
def test_missing_backend_fails_at_init_trackers_with_the_pip_line(monkeypatch, name):
    missing = registry.BuiltInTracker(
        registry._BUILT_IN[name].target, ("accel_test_module_that_does_not_exist",), name
    )
    monkeypatch.setitem(registry._BUILT_IN, name, missing)
    accelerator = Accelerator(cpu=True, log_with=name)  # known: accepted at construction
    with pytest.raises(TrackerNotInstalledError, match=rf'pip install "accel-core\[{name}\]"'):
        accelerator.init_trackers("demo")


def test_logger_type_to_class_is_a_live_view_of_the_registry():
    # Accelerate 1.15's keys, plus accel's dependency-free jsonl tracker
    accelerate_keys = {"aim", "comet_ml", "mlflow", "tensorboard", "wandb", "clearml", "dvclive"}
    assert accelerate_keys | {"swanlab", "trackio", "jsonl"} <= set(LOGGER_TYPE_TO_CLASS)
    assert LOGGER_TYPE_TO_CLASS["clearml"] is ClearMLTracker  # the backend is not needed
    assert LOGGER_TYPE_TO_CLASS["swanlab"] is SwanLabTracker
    assert "nope" not in LOGGER_TYPE_TO_CLASS

    class Mine(GeneralTracker):
        name = "mine"
        requires_logging_directory = False
        tracker = None

    try:
        register_tracker_class(Mine)
        assert LOGGER_TYPE_TO_CLASS["mine"] is Mine
        del LOGGER_TYPE_TO_CLASS["mine"]
        assert "mine" not in LOGGER_TYPE_TO_CLASS
        LOGGER_TYPE_TO_CLASS["other_name"] = Mine
        assert registry.tracker_class("other_name") is Mine
    finally:
        unregister_tracker_class("mine")
        unregister_tracker_class("other_name")
    with pytest.raises(KeyError, match="can't be removed"):
        del LOGGER_TYPE_TO_CLASS["tensorboard"]
    with pytest.raises(TypeError, match="GeneralTracker subclass"):
        LOGGER_TYPE_TO_CLASS["x"] = dict  # type: ignore[assignment]


# -- the real backends, when installed ------------------------------------------------------------


def test_real_dvclive_writes_params_and_metrics(tmp_path, monkeypatch):
    pytest.importorskip("dvclive")
    monkeypatch.chdir(tmp_path)  # DVCLive writes dvc.yaml into the working directory
    accelerator = Accelerator(cpu=True, log_with="dvclive")
    folder = tmp_path / "dvc"
    init = {"dvclive": {"dir": str(folder), "save_dvc_exp": False}}
    accelerator.init_trackers("p", config={"lr": 0.1}, init_kwargs=init)
    accelerator.log({"loss": 1.5}, step=3)
    accelerator.end_training()
    assert (folder / "params.yaml").read_text() == "lr: 0.1\n"
    assert json.loads((folder / "metrics.json").read_text()) == {"loss": 1.5, "step": 3}


def test_real_swanlab_offline_run(tmp_path):
    swanlab = pytest.importorskip("swanlab")
    accelerator = Accelerator(cpu=True, log_with="swanlab")
    init = {"swanlab": {"mode": "offline", "logdir": str(tmp_path)}}
    accelerator.init_trackers("p", config={"lr": 0.1}, init_kwargs=init)
    accelerator.log({"loss": 1.5}, step=3)
    assert dict(swanlab.config) == {"lr": 0.1}
    accelerator.end_training()
    assert list(tmp_path.glob("run-*/run-*.swanlab"))


def test_real_clearml_offline_task(tmp_path, monkeypatch):
    clearml = pytest.importorskip("clearml")
    monkeypatch.setenv("HOME", str(tmp_path))
    clearml.Task.set_offline(True)
    accelerator = Accelerator(cpu=True, log_with="clearml")
    accelerator.init_trackers("p", config={"lr": 0.1})
    accelerator.log({"eval_loss": 1.5}, step=3)
    task = accelerator.get_tracker("clearml", unwrap=True)
    assert (task.name, task.get_project_name()) == ("p", "p")
    accelerator.end_training()
    (metrics,) = tmp_path.glob(".clearml/cache/offline/*/metrics.jsonl")
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    flat = [e for line in events for e in (line if isinstance(line, list) else [line])]
    assert [(e["metric"], e["variant"], e["value"], e["iter"]) for e in flat] == [
        ("loss", "eval", 1.5, 3)
    ]
