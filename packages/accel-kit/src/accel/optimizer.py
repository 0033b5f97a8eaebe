"""The prepared optimizer (Accelerate's ``accelerate.optimizer``)."""

from accel._lazy import export_table

_NAMES = {
    "AcceleratedOptimizer": "accel_core",
    "move_to_device": "accel_core.optimizer_helpers",
    "patch_optimizer_step": "accel_core.optimizer_helpers",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
