"""``accelerate.utils.ao``: torchao FP8 helpers (out of scope in accel)."""

from accel._lazy import export_table

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
