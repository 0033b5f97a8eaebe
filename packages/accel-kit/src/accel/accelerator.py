"""``accelerate.accelerator``: the Accelerator."""

from accel._lazy import export_table

_NAMES = {
    "Accelerator": "accel_core",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
