"""``accelerate.utils.versions``: version comparison (accel-ops)."""

from accel._lazy import export_table

_NAMES = {
    "compare_versions": "accel_ops",
    "is_torch_version": "accel_ops",
    "torch_version": "accel_ops.versions",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
