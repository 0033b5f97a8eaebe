"""``accelerate.utils.transformer_engine``: Transformer Engine FP8 (out of scope: using raises)."""

from accel._lazy import export_table

_NAMES = {
    "has_transformer_engine_layers": "accel_core.fp8_transformer_engine",
    "convert_model": "accel_core.fp8_transformer_engine",
    "contextual_fp8_autocast": "accel_core.fp8_transformer_engine",
    "apply_fp8_autowrap": "accel_core.fp8_transformer_engine",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
