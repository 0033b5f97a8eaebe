"""Experiment trackers (Accelerate's ``accelerate.tracking``)."""

from accel._lazy import export_table

_NAMES = {}
_UNSUPPORTED = {
    "GeneralTracker": "trackers are not built yet",
    "TensorBoardTracker": "trackers are not built yet",
    "WandBTracker": "trackers are not built yet",
    "MLflowTracker": "trackers are not built yet",
    "AimTracker": "trackers are not built yet",
    "CometMLTracker": "trackers are not built yet",
    "get_available_trackers": "trackers are not built yet",
    "on_main_process": "trackers are not built yet",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
