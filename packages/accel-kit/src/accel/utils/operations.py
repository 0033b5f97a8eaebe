"""``accelerate.utils.operations``: nested tensors and collectives (defined in accel-ops)."""

from accel._lazy import export_table

_NAMES = {
    "CannotPadNestedTensorWarning": "accel_ops",
    "ConvertOutputsToFp32": "accel_ops",
    "DistributedOperationException": "accel_ops",
    "GatheredParameters": "accel_ops",
    "TENSOR_INT_TO_DTYPE": "accel_ops",
    "TENSOR_TYPE_TO_INT": "accel_ops",
    "broadcast": "accel_ops",
    "broadcast_object_list": "accel_ops",
    "chained_operation": "accel_ops",
    "concatenate": "accel_ops",
    "convert_outputs_to_fp32": "accel_ops",
    "convert_to_fp32": "accel_ops",
    "copy_tensor_to_devices": "accel_ops",
    "find_batch_size": "accel_ops",
    "find_device": "accel_ops",
    "gather": "accel_ops",
    "gather_object": "accel_ops",
    "gather_tensor_shape": "accel_ops",
    "get_data_structure": "accel_ops",
    "get_shape": "accel_ops",
    "honor_type": "accel_ops",
    "ignorant_find_batch_size": "accel_ops",
    "initialize_tensors": "accel_ops",
    "is_namedtuple": "accel_ops",
    "is_tensor_information": "accel_ops",
    "is_torch_tensor": "accel_ops",
    "is_torch_xpu_tensor": "accel_ops",
    "listify": "accel_ops",
    "pad_across_processes": "accel_ops",
    "pad_input_tensors": "accel_ops",
    "recursively_apply": "accel_ops",
    "reduce": "accel_ops",
    "send_to_device": "accel_ops",
    "slice_tensors": "accel_ops",
    "verify_operation": "accel_ops",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
