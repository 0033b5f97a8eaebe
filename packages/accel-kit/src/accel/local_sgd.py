"""Local SGD (Accelerate's ``accelerate.local_sgd``)."""

from accel._lazy import export_table

_NAMES = {
    "LocalSGD": "accel_core",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
