"""ParallelismConfig at launch: Accelerate's ``--parallelism_config_*`` arguments and the
``PARALLELISM_CONFIG_*`` variables a worker's ``ParallelismConfig`` reads.

The sizes are those of the mesh dimensions known here (accel-core's records,
:func:`accel_launch.launch.engines.dimensions`): a dimension's ``launch_option`` is its flag and
config-file key, its ``config_key`` names its variable (``tp_size``:
``PARALLELISM_CONFIG_TP_SIZE``). The settings of a dimension's handler (``cp_backend``,
``sp_seq_length``, ...) are Accelerate's (:data:`SETTINGS`). The config-file keys are
:func:`accel_launch.config.schema.parallelism_keys`; the launch options
(:mod:`accel_launch.launch.options`) are built from them with the defaults below, and every launch
path writes the variables through :func:`prepare_extend_env_parallelism_config`. Unlike
Accelerate, the launcher does not require FSDP 2 for them: the worker decides what it can run.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import NamedTuple

#: The config file's section, and the prefix of its keys and of the launch options.
SECTION = "parallelism_config"
PREFIX = "parallelism_config_"
#: Accelerate 1.15's launch default of every size.
SIZE_DEFAULT = 1


class Setting(NamedTuple):
    """One setting of a dimension's handler: its argument name after :data:`PREFIX`, Accelerate
    1.15's launch default, and whether it is written whatever the size (else only with the
    dimension's size above 1, as Accelerate does)."""

    name: str
    default: object
    always: bool = False


#: Accelerate's settings of each dimension's handler, by dimension name, in their order.
SETTINGS: Mapping[str, tuple[Setting, ...]] = {
    "cp": (Setting("cp_backend", "torch", always=True), Setting("cp_comm_strategy", "allgather")),
    "sp": (
        Setting("sp_backend", "deepspeed", always=True),
        Setting("sp_seq_length", None),
        Setting("sp_seq_length_is_variable", True),
        Setting("sp_attn_implementation", "sdpa"),
    ),
}


def default(key: str) -> object:
    """The launch default of the ``parallelism_config`` key or option ``key``: a setting's, else
    a size's (:data:`SIZE_DEFAULT`)."""
    name = key.removeprefix(PREFIX)
    for settings in SETTINGS.values():
        for setting in settings:
            if setting.name == name:
                return setting.default
    return SIZE_DEFAULT


def prepare_extend_env_parallelism_config(
    args: argparse.Namespace, current_env: dict[str, str]
) -> dict[str, str]:
    """Add ``ACCELERATE_USE_PARALLELISM_CONFIG=true`` and the ``PARALLELISM_CONFIG_*`` variables
    ``ParallelismConfig`` reads, from ``args``' ``parallelism_config_*`` fields; returns
    ``current_env``.

    A field that is absent or ``None`` takes Accelerate's launch default. Every known dimension's
    size is written, and its handler's settings: a backend with any size, the others (context
    parallelism's communication strategy, the sequence options) only with the size above 1, a
    sequence length only when one is given.
    """
    from accel_launch.launch.engines import dimensions

    def get(name: str, fallback: object) -> object:
        value = getattr(args, PREFIX + name, None)
        return fallback if value is None else value

    current_env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true"
    for dimension in dimensions():
        if dimension.launch_option is None:
            continue
        size = getattr(args, dimension.launch_option, None)
        size = SIZE_DEFAULT if size is None else size
        current_env[f"PARALLELISM_CONFIG_{dimension.config_key.upper()}"] = str(size)
        for setting in SETTINGS.get(dimension.name, ()):
            value = get(setting.name, setting.default)
            if value is not None and (setting.always or int(str(size)) > 1):
                current_env[f"PARALLELISM_CONFIG_{setting.name.upper()}"] = str(value)
    return current_env
