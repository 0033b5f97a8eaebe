"""Choosing trackers: names, "all", custom trackers, and the errors that carry the fix."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tracking_readers import jsonl_run

from accel_core import Accelerator, LoggerType
from accel_core.tracking import (
    GeneralTracker,
    TrackerNotInstalledError,
    TrackerStartError,
    UnknownTrackerError,
    get_available_trackers,
    register_tracker_class,
    registry,
    unregister_tracker_class,
)


class RecordingTracker(GeneralTracker):
    """A custom tracker that keeps everything in memory."""

    name = "recording"
    requires_logging_directory = False

    def __init__(self, run_name: str = "", prefix: str = "") -> None:
        super().__init__()
        self.run_name = run_name
        self.prefix = prefix
        self.calls: list[tuple] = []

    @property
    def tracker(self):
        return self.calls

    def start(self):
        self.calls.append(("start", self.run_name))

    def store_init_configuration(self, values):
        self.calls.append(("config", dict(values)))

    def log(self, values, step=None, **kwargs):
        self.calls.append(("log", {self.prefix + k: v for k, v in values.items()}, step, kwargs))

    def finish(self):
        self.calls.append(("finish",))


class BrokenTracker(RecordingTracker):
    name = "broken"

    def start(self):
        raise ConnectionError("no server at localhost:1")


@pytest.fixture
def registered():
    register_tracker_class(RecordingTracker)
    register_tracker_class(BrokenTracker)
    yield
    unregister_tracker_class("recording")
    unregister_tracker_class("broken")


def test_log_with_forms_are_normalised_and_deduplicated(tmp_path):
    instance = RecordingTracker("given")
    accelerator = Accelerator(
        log_with=[LoggerType.TENSORBOARD, "TensorBoard", "jsonl", instance], project_dir=tmp_path
    )
    assert accelerator.log_with == [LoggerType.TENSORBOARD, "jsonl", instance]
    assert Accelerator(log_with="jsonl", project_dir=tmp_path).log_with == ["jsonl"]
    assert Accelerator().log_with == [] and Accelerator().trackers == []


def test_unknown_name_fails_at_construction_listing_the_valid_ones():
    with pytest.raises(UnknownTrackerError) as caught:
        Accelerator(log_with=["jsonl", "tensorbord"], project_dir="unused")
    message = str(caught.value)
    assert "'tensorbord'" in message
    for name in (
        "'aim'",
        "'clearml'",
        "'comet_ml'",
        "'dvclive'",
        "'swanlab'",
        "'jsonl'",
        "'mlflow'",
        "'tensorboard'",
        "'trackio'",
        "'wandb'",
        "'all'",
    ):
        assert name in message


def test_tracker_that_needs_a_logging_directory_fails_at_construction():
    with pytest.raises(
        ValueError,
        match=r"^Logging with `jsonl` requires a `logging_dir` to be passed in.*project_dir",
    ):
        Accelerator(log_with="jsonl")


def test_a_class_instead_of_an_instance_is_explained():
    with pytest.raises(TypeError, match="pass an instance"):
        Accelerator(log_with=RecordingTracker)


def test_missing_backend_fails_at_init_trackers_with_the_pip_line(monkeypatch, tmp_path):
    missing = registry.BuiltInTracker(
        registry._BUILT_IN["wandb"].target, ("accel_test_module_that_does_not_exist",), "wandb"
    )
    monkeypatch.setitem(registry._BUILT_IN, "wandb", missing)
    accelerator = Accelerator(log_with=["jsonl", "wandb"], project_dir=tmp_path)
    with pytest.raises(TrackerNotInstalledError) as caught:
        accelerator.init_trackers("demo")
    assert 'pip install "accel-core[wandb]"' in str(caught.value)
    assert accelerator.trackers == []  # nothing was started
    assert "wandb" not in get_available_trackers()


def test_all_picks_every_installed_backend(monkeypatch, tmp_path):
    missing = registry.BuiltInTracker(
        registry._BUILT_IN["aim"].target, ("accel_test_module_that_does_not_exist",), "aim"
    )
    monkeypatch.setitem(registry._BUILT_IN, "aim", missing)
    installed = [name for name in get_available_trackers()]
    assert "aim" not in installed and "jsonl" in installed
    accelerator = Accelerator(log_with="all", project_dir=tmp_path)
    assert accelerator.log_with == installed
    with pytest.warns(UserWarning, match="leaves out .*jsonl"):
        without_dir = Accelerator(log_with=LoggerType.ALL)
    assert "jsonl" not in without_dir.log_with and "tensorboard" not in without_dir.log_with


def test_registered_tracker_is_used_by_name_with_its_init_and_log_kwargs(registered):
    accelerator = Accelerator(log_with="recording")
    accelerator.init_trackers("demo", config={"lr": 1}, init_kwargs={"recording": {"prefix": "p/"}})
    accelerator.log({"loss": 2}, step=7, log_kwargs={"recording": {"commit": False}})
    tracker = accelerator.get_tracker("recording")
    assert isinstance(tracker, RecordingTracker)
    assert accelerator.get_tracker("recording", unwrap=True) is tracker.calls
    accelerator.end_training()
    accelerator.end_training()
    assert tracker.calls == [
        ("start", "demo"),
        ("config", {"lr": 1}),
        ("log", {"p/loss": 2}, 7, {"commit": False}),
        ("finish",),
    ]


def test_instances_in_log_with_are_started_as_given(tmp_path):
    mine = RecordingTracker("mine")
    accelerator = Accelerator(log_with=["jsonl", mine], project_dir=tmp_path)
    accelerator.init_trackers("demo")
    accelerator.log({"x": 1})
    assert accelerator.trackers[1] is mine
    accelerator.end_training()
    assert [call[0] for call in mine.calls] == ["start", "log", "finish"]


def test_registering_checks_the_class():
    with pytest.raises(
        ValueError, match=r"^`tracker_class` must be a subclass of `GeneralTracker`"
    ):
        register_tracker_class(object)  # type: ignore[arg-type]

    class Nameless(GeneralTracker):
        requires_logging_directory = False

    with pytest.raises(ValueError, match="non-empty `name`"):
        register_tracker_class(Nameless)


def test_incomplete_tracker_class_fails_when_created():
    class NoTrackerProperty(GeneralTracker):
        name = "incomplete"
        requires_logging_directory = False

    with pytest.raises(NotImplementedError, match="`tracker`"):
        NoTrackerProperty()


def test_wrong_init_kwargs_fail_at_init_trackers_naming_the_signature(registered):
    accelerator = Accelerator(log_with="recording")
    with pytest.raises(TypeError, match=r"init_kwargs\['recording'\].*colour"):
        accelerator.init_trackers("demo", init_kwargs={"recording": {"colour": "red"}})


def test_a_tracker_that_cannot_start_closes_the_ones_started(registered, tmp_path):
    accelerator = Accelerator(log_with=["jsonl", "broken"], project_dir=tmp_path)
    with pytest.raises(TrackerStartError, match=r"broken tracker could not start.*localhost:1"):
        accelerator.init_trackers("demo")
    (run_file,) = (tmp_path / "demo").glob("*.jsonl")
    assert jsonl_run(run_file)[1]["status"] == "finished"


def test_init_trackers_twice_is_refused_until_end_training(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    accelerator.init_trackers("demo")
    with pytest.raises(RuntimeError, match="already called"):
        accelerator.init_trackers("demo")
    accelerator.end_training()
    accelerator.init_trackers("again")
    assert accelerator.get_tracker("jsonl").run_file.parent.name == "again"
    accelerator.end_training()


def test_get_tracker_errors(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    with pytest.raises(RuntimeError, match="before init_trackers"):
        accelerator.get_tracker("jsonl")
    accelerator.init_trackers("demo")
    with pytest.raises(ValueError, match=r"no such tracker; log_with holds \['jsonl'\]"):
        accelerator.get_tracker("wandb")
    accelerator.end_training()


def test_log_before_init_trackers_warns_once_and_writes_nothing(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    with pytest.warns(UserWarning, match="before init_trackers"):
        accelerator.log({"x": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accelerator.log({"x": 2})
    assert not (tmp_path / "demo").exists()


def test_init_kwargs_for_trackers_not_chosen_warn(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    with pytest.warns(UserWarning, match=r"\['wandb'\]"):
        accelerator.init_trackers("demo", init_kwargs={"wandb": {"mode": "offline"}})
    accelerator.end_training()


def test_bad_reduction_is_refused_before_any_collective(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    accelerator.init_trackers("demo")
    with pytest.raises(ValueError, match=r"reduce='median'\) is not supported.*'mean'"):
        accelerator.log({"x": 1}, reduce="median")
    accelerator.log({"x": 3, "n": 2, "s": "text", "d": {"y": 1.5}}, step=0, reduce="mean")
    run_file = accelerator.get_tracker("jsonl").run_file
    accelerator.end_training()
    # one process: the mean is the value itself; ints become floats only for "mean"
    assert jsonl_run(run_file)[0][0]["values"] == {"x": 3.0, "n": 2.0, "s": "text", "d": {"y": 1.5}}
