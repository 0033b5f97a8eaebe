"""``accelerate.utils.modeling``: model size, device-map and weight-loading helpers.

Defined in accel-bigmodel; the mixed-precision helpers in accel-core, ``WEIGHTS_INDEX_NAME`` in
accel-ops.
"""

from accel._lazy import export_table

_NAMES = {
    "WEIGHTS_INDEX_NAME": "accel_ops",
    "align_module_device": "accel_bigmodel",
    "calculate_maximum_sizes": "accel_bigmodel",
    "check_device_map": "accel_bigmodel",
    "check_device_same": "accel_bigmodel",
    "check_tied_parameters_in_config": "accel_bigmodel",
    "check_tied_parameters_on_same_device": "accel_bigmodel",
    "clean_device_map": "accel_bigmodel",
    "compute_module_sizes": "accel_bigmodel",
    "compute_module_total_buffer_size": "accel_bigmodel",
    "convert_file_size_to_int": "accel_bigmodel",
    "dtype_byte_size": "accel_bigmodel",
    "fallback_allocate": "accel_bigmodel",
    "find_tied_parameters": "accel_bigmodel",
    "get_balanced_memory": "accel_bigmodel",
    "get_grad_scaler": "accel_core",
    "get_max_layer_size": "accel_bigmodel",
    "get_max_memory": "accel_bigmodel",
    "get_mixed_precision_context_manager": "accel_core",
    "get_module_leaves": "accel_bigmodel",
    "get_module_size_with_ties": "accel_bigmodel",
    "get_non_persistent_buffers": "accel_bigmodel",
    "get_state_dict_from_offload": "accel_bigmodel",
    "get_state_dict_offloaded_model": "accel_bigmodel",
    "has_offloaded_params": "accel_bigmodel",
    "id_tensor_storage": "accel_bigmodel",
    "infer_auto_device_map": "accel_bigmodel",
    "is_peft_model": "accel_bigmodel",
    "load_checkpoint_in_model": "accel_bigmodel",
    "load_offloaded_weights": "accel_bigmodel",
    "load_state_dict": "accel_bigmodel",
    "named_module_tensors": "accel_bigmodel",
    "retie_parameters": "accel_bigmodel",
    "set_module_tensor_to_device": "accel_bigmodel",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
