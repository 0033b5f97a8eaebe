"""Experiment trackers (Accelerate's ``accelerate.tracking``)."""

from accel._lazy import export_table

_NAMES = {
    "GeneralTracker": "accel_core.tracking",
    "TensorBoardTracker": "accel_core.tracking",
    "WandBTracker": "accel_core.tracking",
    "TrackioTracker": "accel_core.tracking",
    "CometMLTracker": "accel_core.tracking",
    "AimTracker": "accel_core.tracking",
    "MLflowTracker": "accel_core.tracking",
    "ClearMLTracker": "accel_core.tracking",
    "DVCLiveTracker": "accel_core.tracking",
    "SwanLabTracker": "accel_core.tracking",
    "LOGGER_TYPE_TO_CLASS": "accel_core.tracking",
    "register_tracker_class": "accel_core.tracking",
    "get_available_trackers": "accel_core.tracking",
    "on_main_process": "accel_core.tracking",
    "filter_trackers": "accel_core.tracking",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
