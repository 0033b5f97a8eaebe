"""Process-aware logging (Accelerate's ``accelerate.logging``)."""

from accel._lazy import export_table

_NAMES = {
    "get_logger": "accel_core",
    "MultiProcessAdapter": "accel_core.process_logging",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
