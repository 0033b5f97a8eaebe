"""Start processes from a notebook or a test (Accelerate's ``accelerate.launchers``)."""

from accel._lazy import export_table

_NAMES = {
    "notebook_launcher": "accel_core",
    "debug_launcher": "accel_core",
    "test_launch": "accel_launch",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
