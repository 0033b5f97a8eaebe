"""``accelerate.utils.environment``: environment-variable and machine helpers (accel-ops)."""

from accel._lazy import export_table

_NAMES = {
    "CPUInformation": "accel_ops",
    "are_libraries_initialized": "accel_ops",
    "check_cuda_fp8_capability": "accel_ops",
    "check_cuda_p2p_ib_support": "accel_ops",
    "clear_environment": "accel_ops",
    "convert_dict_to_env_variables": "accel_ops",
    "get_cpu_distributed_information": "accel_ops",
    "get_current_device_type": "accel_ops",
    "get_driver_version": "accel_ops",
    "get_gpu_info": "accel_ops",
    "get_int_from_env": "accel_ops",
    "override_numa_affinity": "accel_ops",
    "parse_choice_from_env": "accel_ops",
    "parse_flag_from_env": "accel_ops",
    "patch_environment": "accel_ops",
    "purge_accelerate_environment": "accel_ops",
    "set_numa_affinity": "accel_ops",
    "str_to_bool": "accel_ops",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
