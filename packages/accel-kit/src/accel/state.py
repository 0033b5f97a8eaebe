"""The process and training state (Accelerate's ``accelerate.state``)."""

from accel._lazy import export_table

_NAMES = {
    "PartialState": "accel_ops",
    "is_initialized": "accel_ops",
    "do_nothing": "accel_ops",
    "SharedDict": "accel_ops",
    "ThreadLocalSharedDict": "accel_ops",
    "AcceleratorState": "accel_core",
    "GradientState": "accel_core",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
