"""Experiment trackers behind ``Accelerator(log_with=...)`` (Accelerate's ``accelerate.tracking``).

- :mod:`~accel_core.tracking.base` -- ``GeneralTracker``, the call order, and the optional
  abilities ``SupportsResume`` and ``SupportsFailure``;
- :mod:`~accel_core.tracking.registry` -- names to classes (``register_tracker_class``, the
  ``accel.trackers`` entry points, ``log_with`` checking);
- one module per built-in tracker: TensorBoard, W&B, MLflow, Aim, Comet, Trackio, ClearML,
  DVCLive, SwanLab and the dependency-free JSON-lines tracker; each imports its backend only when
  it starts;
- :mod:`~accel_core.tracking.class_table` -- ``LOGGER_TYPE_TO_CLASS``, a live view of the registry;
- :mod:`~accel_core.tracking.experiment` -- ``ExperimentTracking``, the trackers of one
  ``Accelerator``; :mod:`~accel_core.tracking.mixin` -- ``TrackingMixin``, its methods, which
  delegate to it.

Names are imported from their modules on first use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "GeneralTracker": "base",
    "SupportsFailure": "base",
    "SupportsResume": "base",
    "on_main_process": "base",
    "InactiveTracker": "inactive",
    "TrackingMixin": "mixin",
    "TrackerNotInstalledError": "registry",
    "UnknownTrackerError": "registry",
    "filter_trackers": "registry",
    "get_available_trackers": "registry",
    "known_trackers": "registry",
    "is_registered": "registry",
    "register_tracker_class": "registry",
    "unregister_tracker_class": "registry",
    "TrackerStartError": "session",
    "LOGGER_TYPE_TO_CLASS": "class_table",
    "AimTracker": "aim_tracker",
    "ClearMLTracker": "clearml_tracker",
    "CometMLTracker": "comet_tracker",
    "DVCLiveTracker": "dvclive_tracker",
    "SwanLabTracker": "swanlab_tracker",
    "JSONLinesTracker": "jsonl_tracker",
    "MLflowTracker": "mlflow_tracker",
    "TensorBoardTracker": "tensorboard_tracker",
    "TrackioTracker": "trackio_tracker",
    "WandBTracker": "wandb_tracker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accel_core.tracking' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"accel_core.tracking.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
