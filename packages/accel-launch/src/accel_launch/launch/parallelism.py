"""ParallelismConfig at launch: Accelerate's ``--parallelism_config_*`` arguments and the
``PARALLELISM_CONFIG_*`` variables a worker's ``ParallelismConfig`` reads.

The config-file keys are :data:`accel_launch.config.schema.PARALLELISM_KEYS`; the launch options
(:mod:`accel_launch.launch.options`) are built from them with the defaults below, and every launch
path writes the variables through :func:`prepare_extend_env_parallelism_config`. Unlike Accelerate,
the launcher does not require FSDP 2 for them: the worker decides what it can run.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

#: The config file's section, and the prefix of its keys and of the launch options.
SECTION = "parallelism_config"
PREFIX = "parallelism_config_"

#: Accelerate 1.15's launch defaults, by argument name after :data:`PREFIX`.
DEFAULTS: Mapping[str, object] = {
    "dp_replicate_size": 1,
    "dp_shard_size": 1,
    "tp_size": 1,
    "cp_size": 1,
    "cp_backend": "torch",
    "cp_comm_strategy": "allgather",
    "sp_size": 1,
    "sp_backend": "deepspeed",
    "sp_seq_length": None,
    "sp_seq_length_is_variable": True,
    "sp_attn_implementation": "sdpa",
}

#: Written always; the others only with a context or sequence size above 1 (as Accelerate does).
_ALWAYS = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend")
_ALWAYS += ("sp_size", "sp_backend")
_WITH_CP = ("cp_comm_strategy",)
_WITH_SP = ("sp_seq_length", "sp_seq_length_is_variable", "sp_attn_implementation")


def prepare_extend_env_parallelism_config(
    args: argparse.Namespace, current_env: dict[str, str]
) -> dict[str, str]:
    """Add ``ACCELERATE_USE_PARALLELISM_CONFIG=true`` and the ``PARALLELISM_CONFIG_*`` variables
    ``ParallelismConfig`` reads, from ``args``' ``parallelism_config_*`` fields; returns
    ``current_env``.

    A field that is absent or ``None`` takes Accelerate's launch default; the communication
    strategy is written with ``cp_size`` > 1, the sequence options with ``sp_size`` > 1, and a
    sequence length only when one is given.
    """

    def get(name: str) -> object:
        value = getattr(args, PREFIX + name, None)
        return DEFAULTS[name] if value is None else value

    names = list(_ALWAYS)
    if int(str(get("cp_size"))) > 1:
        names += _WITH_CP
    if int(str(get("sp_size"))) > 1:
        names += _WITH_SP
    current_env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true"
    for name in names:
        value = get(name)
        if value is not None:
            current_env[f"PARALLELISM_CONFIG_{name.upper()}"] = str(value)
    return current_env
