"""``accelerate.utils.tqdm``: the main-process progress bar (accel-ops)."""

from accel._lazy import export_table

_NAMES = {
    "tqdm": "accel_ops",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
