"""``accelerate.utils.other``: assorted helpers (saving, ports, compiled regions)."""

from accel._lazy import export_table

_NAMES = {
    "TORCH_SAFE_GLOBALS": "accel_core",
    "check_os_kernel": "accel_ops",
    "clean_state_dict_for_safetensors": "accel_core",
    "compile_regions": "accel_core",
    "compile_regions_deepspeed": "accel_core",
    "compile_regions_fsdp2": "accel_core",
    "convert_bytes": "accel_ops",
    "extract_model_from_parallel": "accel_core",
    "get_free_port": "accel_base.ports",
    "get_model_tp_size": "accel_core",
    "get_module_children_bottom_up": "accel_core",
    "get_pretty_name": "accel_ops",
    "has_compiled_regions": "accel_core",
    "has_repeated_blocks": "accel_core",
    "is_compiled_module": "accel_core",
    "is_port_in_use": "accel_base.ports",
    "is_repeated_blocks": "accel_core",
    "load": "accel_core",
    "merge_dicts": "accel_ops",
    "model_has_dtensor": "accel_core",
    "recursive_getattr": "accel_ops",
    "save": "accel_core",
    "wait_for_everyone": "accel_ops",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
