"""The accel command: config, test, launch, env, estimate-memory, merge-weights.

Importing this package is cheap (no torch, no yaml): the public names below load their module
on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.4.7"

_EXPORTS = {
    "write_basic_config": "accel_launch.config.defaults",
    "default_config_file": "accel_launch.config.files",
    "load_config": "accel_launch.config.files",
    "save_config": "accel_launch.config.files",
    "is_port_in_use": "accel_launch.launch.ports",
    "AccelLaunchError": "accel_launch.errors",
    "ConfigError": "accel_launch.errors",
    # Accelerate's launch helpers (accelerate.utils.launch, accelerate.launchers.test_launch)
    "prepare_simple_launcher_cmd_env": "accel_launch.launch.prepare_env",
    "prepare_multi_gpu_env": "accel_launch.launch.prepare_env",
    "prepare_deepspeed_cmd_env": "accel_launch.launch.prepare_env",
    "prepare_tpu": "accel_launch.launch.prepare_env",
    "prepare_extend_env_parallelism_config": "accel_launch.launch.prepare_env",
    "env_var_path_add": "accel_launch.launch.prepare_env",
    "PrepareForLaunch": "accel_launch.launch.prepare_for_launch",
    "prepare_sagemager_args_inputs": "accel_launch.launch.out_of_scope",
    "setup_fp8_env": "accel_launch.launch.out_of_scope",
    "test_launch": "accel_launch.launch.launch_check",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_launch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
