"""Process-aware logging (Accelerate's ``accelerate.logging``)."""

from accel._lazy import export_table

_NAMES = {
    "get_logger": "accel_core",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
