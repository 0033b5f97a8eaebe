"""``accelerate.utils.ao``: torchao FP8 helpers (out of scope in accel: converting raises)."""

from accel._lazy import export_table

_NAMES = {
    "find_first_last_linear_layers": "accel_core.fp8_torchao",
    "filter_linear_layers": "accel_core.fp8_torchao",
    "filter_first_and_last_linear_layers": "accel_core.fp8_torchao",
    "has_ao_layers": "accel_core.fp8_torchao",
    "convert_model_to_fp8_ao": "accel_core.fp8_torchao",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
