"""Experiment trackers (Accelerate's ``accelerate.tracking``)."""

from accel._lazy import export_table

_NAMES = {
    "GeneralTracker": "accel_core.tracking",
    "TensorBoardTracker": "accel_core.tracking",
    "WandBTracker": "accel_core.tracking",
    "MLflowTracker": "accel_core.tracking",
    "AimTracker": "accel_core.tracking",
    "CometMLTracker": "accel_core.tracking",
    "get_available_trackers": "accel_core.tracking",
    "on_main_process": "accel_core.tracking",
    "filter_trackers": "accel_core.tracking",
}
_UNSUPPORTED: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
