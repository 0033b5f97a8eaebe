"""The trackers built on RunTracker before ``start``: no backend is imported, and each says so."""

from __future__ import annotations

import pytest

from accel_core.tracking import (
    ClearMLTracker,
    CometMLTracker,
    DVCLiveTracker,
    SwanLabTracker,
    TrackioTracker,
    WandBTracker,
)

# each class with the attribute Accelerate's tracker of that name keeps its run object in
RUN_ATTRIBUTES = [
    (WandBTracker, "run"),
    (CometMLTracker, "writer"),
    (SwanLabTracker, "run"),
    (TrackioTracker, "run"),
    (DVCLiveTracker, "live"),
    (ClearMLTracker, "task"),
]


@pytest.mark.parametrize(("cls", "attribute"), RUN_ATTRIBUTES, ids=lambda x: getattr(x, "name", x))
def test_before_start_there_is_no_run_and_using_one_names_the_tracker(cls, attribute):
    tracker = cls("proj", some_option=1)
    assert tracker.tracker is None and getattr(tracker, attribute) is None
    assert tracker.init_kwargs == {"some_option": 1}
    assert tracker.requires_logging_directory is False
    message = f"the {cls.name} tracker is not started: call init_trackers first"
    with pytest.raises(RuntimeError, match=message):
        tracker.store_init_configuration({"lr": 0.1})
    if cls is not DVCLiveTracker:  # its log imports dvclive first
        with pytest.raises(RuntimeError, match=message):
            tracker.log({"loss": 1.0}, step=1)
    assert tracker.finish() is None  # nothing to close


def test_the_project_name_is_kept_under_accelerates_attribute_names():
    assert WandBTracker("proj").run_name == "proj"
    assert ClearMLTracker("proj").user_provided_run_name == "proj"
