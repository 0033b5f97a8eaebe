"""``accelerate.utils.bnb``: bitsandbytes quantization, out of scope in accel.

The names resolve (accel-bigmodel's ``quantization`` module): the helpers that inspect a model
answer truthfully, the ones that quantize raise ``OutOfScopeError``.
"""

from accel._lazy import export_table

_NAMES = {
    "get_keys_to_not_convert": "accel_bigmodel",
    "get_parameter_device": "accel_bigmodel",
    "get_quantized_model_device_map": "accel_bigmodel",
    "has_4bit_bnb_layers": "accel_bigmodel",
    "load_and_quantize_model": "accel_bigmodel",
    "quantize_and_offload_8bit": "accel_bigmodel",
    "replace_with_bnb_layers": "accel_bigmodel",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
