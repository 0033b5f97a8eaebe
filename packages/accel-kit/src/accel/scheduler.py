"""The prepared scheduler (Accelerate's ``accelerate.scheduler``)."""

from accel._lazy import export_table

_NAMES = {
    "AcceleratedScheduler": "accel_core",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
