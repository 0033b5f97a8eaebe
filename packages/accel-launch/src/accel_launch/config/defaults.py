"""Default values of the config keys, and ``write_basic_config`` for this machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accel_launch.config.schema import MIXED_PRECISIONS
from accel_launch.errors import ConfigError

BASE_DEFAULTS: dict[str, Any] = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "distributed_type": "NO",
    "downcast_bf16": False,
    "enable_cpu_affinity": False,
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "no",
    "num_machines": 1,
    "num_processes": 1,
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": False,
}


def complete(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every missing base key filled in with its default."""
    return {**BASE_DEFAULTS, **config}


def basic_config(mixed_precision: str = "no") -> dict[str, Any]:
    """A sensible config for this machine: every visible GPU, or one CPU process."""
    from accel_launch.devices import count_cuda_devices

    precision = str(mixed_precision).lower()
    if precision not in MIXED_PRECISIONS:
        raise ConfigError(
            f"mixed_precision={mixed_precision!r} is not allowed; expected one of "
            f"{', '.join(MIXED_PRECISIONS)}"
        )
    gpus = count_cuda_devices()
    config = complete({"mixed_precision": precision})
    if gpus > 0:
        config.update(
            num_processes=gpus,
            use_cpu=False,
            gpu_ids="all",
            distributed_type="MULTI_GPU" if gpus > 1 else "NO",
        )
    else:
        config.update(num_processes=1, use_cpu=True, distributed_type="NO")
    return config


def write_basic_config(
    mixed_precision: str = "no", save_location: str | os.PathLike[str] | None = None
) -> Path | bool:
    """Write a config for this machine without asking questions; return the path written.

    Like Accelerate's function of the same name: uses every visible GPU (one process each) or
    one CPU process, ``mixed_precision`` one of ``no``, ``fp16``, ``bf16``. ``save_location``
    defaults to :func:`~accel_launch.config.files.default_config_file`. An existing file is left
    alone: a message is printed and ``False`` returned.
    """
    from accel_launch.config.files import default_config_file, save_config

    path = Path(save_location) if save_location is not None else default_config_file()
    if path.exists():
        print(
            f"Configuration already exists at {path}, will not override. Run `accel config` "
            "to change it, or pass a different save_location."
        )
        return False
    return save_config(basic_config(mixed_precision), path)
