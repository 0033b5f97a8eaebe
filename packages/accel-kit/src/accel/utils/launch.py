"""``accelerate.utils.launch``: launch-environment helpers."""

from accel._lazy import export_table

_NAMES = {
    "PrepareForLaunch": "accel_launch",
    "env_var_path_add": "accel_launch",
    "prepare_deepspeed_cmd_env": "accel_launch",
    "prepare_extend_env_parallelism_config": "accel_launch",
    "prepare_multi_gpu_env": "accel_launch",
    "prepare_sagemager_args_inputs": "accel_launch",
    "prepare_simple_launcher_cmd_env": "accel_launch",
    "prepare_tpu": "accel_launch",
    "setup_fp8_env": "accel_launch",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
