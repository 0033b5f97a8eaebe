"""``accelerate.utils.offload``: offloaded-weight storage (defined in accel-bigmodel)."""

from accel._lazy import export_table

_NAMES = {
    "OffloadedWeightsLoader": "accel_bigmodel",
    "PrefixedDataset": "accel_bigmodel",
    "extract_submodules_state_dict": "accel_bigmodel",
    "load_offloaded_weight": "accel_bigmodel",
    "offload_state_dict": "accel_bigmodel",
    "offload_weight": "accel_bigmodel",
    "save_offload_index": "accel_bigmodel",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
