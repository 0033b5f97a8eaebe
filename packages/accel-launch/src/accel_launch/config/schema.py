"""The keys a config file may hold, their types and allowed values, and the check enforcing them.

The keys are the ones Hugging Face Accelerate's ``accelerate config`` writes, so its files load as
they are. An unknown key is an error naming the nearest valid key; a wrong value is an error naming
the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from accel_base.env_values import MIXED_PRECISION_CHOICES, parse_bool
from accel_launch.errors import ConfigError

if TYPE_CHECKING:
    from accel_base.engine_description import EngineDescription

#: The mixed-precision modes: accel-base's one list, which the workers' LaunchEnvironment accepts.
MIXED_PRECISIONS = MIXED_PRECISION_CHOICES
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")
DYNAMO_BACKENDS = (
    "no",
    "eager",
    "aot_eager",
    "inductor",
    "aot_ts_nvfuser",
    "nvprims_nvfuser",
    "cudagraphs",
    "ofi",
    "fx2trt",
    "onnxrt",
    "tensorrt",
    "aot_torchxla_trace_once",
    "torchxla_trace_once",
    "ipex",
    "tvm",
)
DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune")
# ParallelismConfig's allowed values (Accelerate 1.15's ParallelismConfig and its CP handler)
CP_BACKENDS = ("torch",)
CP_COMM_STRATEGIES = ("allgather", "alltoall")
SP_BACKENDS = ("deepspeed",)


@dataclass(frozen=True)
class Field:
    """One config key: its kind (bool, int, float, str, list, dict, any) and allowed values."""

    kind: str
    choices: tuple[Any, ...] | None = None
    nullable: bool = True
    help: str = ""
    #: a free-text ``str`` that also takes what YAML reads as another scalar (``true``, ``2``),
    #: kept as read: an engine's free-text option (FSDP's ``fsdp_reshard_after_forward`` is
    #: true/false for FSDP 2, a strategy name for FSDP 1)
    scalars: bool = False
    #: the smallest value an ``int`` takes (0 when unset)
    minimum: int | None = None
    #: a ``str`` with choices that also takes a choice's number, counted from 1 (an engine's
    #: launch option with ``numbered_choices``: FSDP's ``fsdp_sharding_strategy: 1``)
    numbered: bool = False


def _f(kind: str, choices: tuple[Any, ...] | None = None, help: str = "") -> Field:
    return Field(kind, choices, True, help)


DYNAMO_KEYS: dict[str, Field] = {
    "dynamo_backend": _f("str", tuple(b.upper() for b in DYNAMO_BACKENDS), "torch.compile backend"),
    "dynamo_mode": _f("str", DYNAMO_MODES, "torch.compile mode"),
    "dynamo_use_fullgraph": _f("bool", help="compile the whole model as one graph"),
    "dynamo_use_dynamic": _f("bool", help="dynamic shapes"),
    "dynamo_use_regional_compilation": _f("bool", help="compile repeated blocks once"),
}


def _size(help: str) -> Field:
    return Field("int", None, True, help, minimum=1)


#: Accelerate's settings of a dimension's handler, by dimension name: keys of the
#: ``parallelism_config`` section that follow the dimension's size there.
PARALLELISM_SETTINGS: dict[str, dict[str, Field]] = {
    "cp": {
        "parallelism_config_cp_backend": _f("str", CP_BACKENDS, "context-parallel backend"),
        "parallelism_config_cp_comm_strategy": _f(
            "str", CP_COMM_STRATEGIES, "context-parallel communication (with cp_size > 1)"
        ),
    },
    "sp": {
        "parallelism_config_sp_backend": _f("str", SP_BACKENDS, "sequence-parallel backend"),
        "parallelism_config_sp_seq_length": _size(
            "sequence length when every batch has the same one (with sp_size > 1)"
        ),
        "parallelism_config_sp_seq_length_is_variable": _f(
            "bool", help="the sequence length may change between batches (with sp_size > 1)"
        ),
        "parallelism_config_sp_attn_implementation": _f(
            "str",
            help="attention of sequence parallelism: sdpa, flash_attention_2, ... (sp_size > 1)",
        ),
    },
}


def parallelism_keys() -> dict[str, Field]:
    """Accelerate's ``parallelism_config`` section; its keys are the names of the launch options.

    For each mesh dimension known here (:func:`accel_launch.launch.engines.dimensions`: those of
    Accelerate's ``ParallelismConfig`` and those the installed engines declare), in their order:
    its size (the record's ``launch_option``, help from its ``description``), then its settings
    (:data:`PARALLELISM_SETTINGS`). Empty without accel-core, which holds the records.
    """
    from accel_launch.launch.engines import dimensions

    keys: dict[str, Field] = {}
    for dimension in dimensions():
        if dimension.launch_option is None:
            continue
        keys[dimension.launch_option] = _size(dimension.description)
        keys.update(PARALLELISM_SETTINGS.get(dimension.name, {}))
    return keys


#: Keys Accelerate knows and accel accepts only when empty (features out of accel's scope).
UNSUPPORTED_SECTIONS = ("megatron_lm_config", "mpirun_config", "ipex_config")

TOP_KEYS: dict[str, Field] = {
    "compute_environment": _f("str", ("LOCAL_MACHINE",), "where the job runs"),
    "distributed_type": _f("str", ("NO", "MULTI_CPU", "MULTI_GPU"), "how processes cooperate"),
    "strategy": _f(
        "str",
        help="accel's own key: the strategy by name (ddp, single_device or an installed engine); "
        "chosen over distributed_type",
    ),
    "mixed_precision": _f("str", MIXED_PRECISIONS, "mixed precision mode"),
    "use_cpu": _f("bool", help="run on CPU even with accelerators present"),
    "debug": _f("bool", help="check collectives across ranks"),
    "num_processes": _f("int", help="total processes over all machines"),
    "machine_rank": _f("int", help="rank of this machine"),
    "num_machines": _f("int", help="machines in the job"),
    "gpu_ids": _f("str", help="GPU ids of this machine to use, comma-separated, or all"),
    "main_process_ip": _f("str", help="address of the machine of rank 0"),
    "main_process_port": _f("int", help="port of the machine of rank 0"),
    "rdzv_backend": _f("str", RDZV_BACKENDS, "rendezvous backend"),
    "rdzv_conf": _f("str", help="more rendezvous settings, key=value,... (torchrun's)"),
    "min_machines": _f(
        "int", help="accel's own key: the fewest machines the job goes on with (c10d rendezvous)"
    ),
    "max_restarts": _f("int", help="accel's own key: restarts of the worker group after a fault"),
    "preemption_signal": _f(
        "str",
        help="accel's own key: the signal that makes the job save a checkpoint and stop "
        "(SIGTERM; SIGUSR1 for SLURM's --signal=USR1@90; none turns it off)",
    ),
    "preemption_grace": _f(
        "float", help="accel's own key: seconds the workers get to save after that signal"
    ),
    "project_dir": _f(
        "str",
        help="accel's own key: the project folder of a script that sets none (preemption "
        "checkpoints, --auto_resume)",
    ),
    "auto_resume": _f(
        "bool", help="accel's own key: load the latest complete checkpoint before training"
    ),
    "join_timeout": _f(
        "float", help="accel's own key: seconds a new process group waits for all its ranks"
    ),
    "same_network": _f("bool", help="all machines on one local network"),
    "main_training_function": _f("str", help="function to call (TPU launches only)"),
    "enable_cpu_affinity": _f("bool", help="pin processes to CPU cores near their GPU"),
    "downcast_bf16": _f("bool", help="under bf16 on TPU: store float64 tensors as bfloat16 too"),
    "num_cpu_threads_per_process": _f("int", help="OMP_NUM_THREADS of each process"),
    "tpu_name": _f("str", help="TPU pods (accepted, not used by accel)"),
    "tpu_zone": _f("str", help="TPU pods (accepted, not used by accel)"),
    "tpu_use_cluster": _f("bool", help="TPU pods (accepted, not used by accel)"),
    "tpu_use_sudo": _f("bool", help="TPU pods (accepted, not used by accel)"),
    "command_file": _f("str", help="TPU pods (accepted, not used by accel)"),
    "commands": _f("list", help="TPU pods (accepted, not used by accel)"),
    "tpu_vm": _f("list", help="TPU pods (accepted, not used by accel)"),
    "tpu_env": _f("list", help="TPU pods (accepted, not used by accel)"),
    "dynamo_config": _f("dict", help="torch.compile options (section below)"),
    "parallelism_config": _f(
        "dict", help="ParallelismConfig sizes (section below); a non-empty section turns it on"
    ),
    **{
        name: _f("dict", help="out of scope: accepted only when empty")
        for name in UNSUPPORTED_SECTIONS
    },
}

#: The launcher's own sections (and ``parallelism_config``, from the mesh dimensions known
#: here); each installed engine adds its own (:func:`sections`).
BASE_SECTIONS: dict[str, dict[str, Field]] = {
    "dynamo_config": DYNAMO_KEYS,
}
_KINDS = {"flag": "bool"}


def _engines() -> Mapping[str, EngineDescription]:
    from accel_launch.launch.engines import installed

    return installed()


def engine_fields(description: EngineDescription) -> dict[str, Field]:
    """The keys of an engine's config-file section (or top-level keys, without one): its launch
    options, its other config keys, then the older names of keys (``renamed_config_keys``),
    each read like the key that replaced it."""
    fields: dict[str, Field] = {}
    for option in description.launch_options:
        kind = _KINDS.get(option.kind, option.kind)
        free_text = kind == "str" and option.choices is None
        fields[option.section_key] = Field(
            kind, option.choices, True, option.help, free_text, numbered=option.numbered_choices
        )
    for key, spec in description.config_keys.items():
        fields[key] = Field(spec.kind, spec.choices, True, spec.help)
    for old, new in description.renamed_config_keys.items():
        fields.setdefault(old, replace(fields[new], help=f"older name of {new}"))
    return fields


@cache
def sections() -> dict[str, dict[str, Field]]:
    """Every section a config file may hold here: the launcher's and the installed engines'."""
    found = dict(BASE_SECTIONS)
    found["parallelism_config"] = parallelism_keys()
    for description in _engines().values():
        if description.config_section:
            found.setdefault(description.config_section, engine_fields(description))
    return found


@cache
def top_keys() -> dict[str, Field]:
    """Every top-level key a config file may hold here: Accelerate's, the installed engines'
    ``distributed_type`` values and sections, and the keys of engines without a section."""
    from accel_launch.launch.engines import distributed_types

    keys = dict(TOP_KEYS)
    keys["distributed_type"] = replace(TOP_KEYS["distributed_type"], choices=distributed_types())
    for description in _engines().values():
        if description.config_section:
            help = f"{description.title} options (section below)"
            keys.setdefault(description.config_section, _f("dict", help=help))
        else:
            for key, field in engine_fields(description).items():
                keys.setdefault(key, field)
    return keys


def _unknown_key_error(
    where: str, key: str, known: Mapping[str, Field], section: str = ""
) -> ConfigError:
    from accel_launch.launch.engines import ENGINE_HINT

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.5)
    prefix = f"{section}." if section else ""
    hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
    engine = (
        f" A section of an engine is known once the engine is installed. {ENGINE_HINT}"
        if not section and key.endswith("_config")
        else ""
    )
    return ConfigError(
        f"unknown key '{prefix}{key}' in {where}.{hint} Valid keys"
        f"{' of ' + section if section else ''}: {', '.join(sorted(known))}.{engine}"
    )


def _bad_value(where: str, key: str, value: object, expected: str) -> ConfigError:
    return ConfigError(f"{where}: {key}={value!r} is not allowed; expected {expected}.")


def coerce(where: str, key: str, value: object, spec: Field) -> object:
    """Check one value against its field and return it in canonical form (raises ConfigError)."""
    if value is None:
        return None
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return parse_bool(value)
            except ValueError:
                pass
        raise _bad_value(where, key, value, "true or false")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _bad_value(where, key, value, "an integer")
        try:
            number = int(value)
        except ValueError:
            raise _bad_value(where, key, value, "an integer") from None
        if spec.choices is not None and number not in spec.choices:
            raise _bad_value(where, key, value, "one of " + ", ".join(map(str, spec.choices)))
        lowest = 0 if spec.minimum is None else spec.minimum
        if spec.choices is None and number < lowest:
            raise _bad_value(where, key, value, f"an integer >= {lowest}")
        return number
    if kind == "float":
        if isinstance(value, bool):
            raise _bad_value(where, key, value, "a number")
        try:
            return float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise _bad_value(where, key, value, "a number") from None
    if kind == "str":
        if (
            spec.numbered  # Accelerate's older files: fsdp_sharding_strategy 1 = FULL_SHARD ...
            and isinstance(value, int)
            and not isinstance(value, bool)
            and spec.choices is not None
            and 1 <= value <= len(spec.choices)
        ):
            value = spec.choices[value - 1]
        if key == "gpu_ids" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if spec.scalars and isinstance(value, (bool, int, float)):
            return value
        if not isinstance(value, str):
            raise _bad_value(where, key, value, "a string")
        if spec.choices is not None:
            for choice in spec.choices:
                if value.lower() == str(choice).lower():
                    return choice
            raise _bad_value(where, key, value, "one of " + ", ".join(map(str, spec.choices)))
        return value
    if kind == "list":
        if not isinstance(value, list):
            raise _bad_value(where, key, value, "a list")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            raise _bad_value(where, key, value, "a mapping of keys to values")
        return value
    return value


def _absent_engine_section(key: object, value: object) -> bool:
    """An empty ``*_config`` section: Accelerate writes those of engines not in use, which may
    not be installed here."""
    return isinstance(key, str) and key.endswith("_config") and not value


def validate(config: object, where: str = "config file") -> dict[str, Any]:
    """Check a loaded config mapping; return a canonical copy. Raises ConfigError on any problem.

    ``where`` names the file in messages. The keys are Accelerate's, ``strategy``, and those the
    installed engines describe (their ``distributed_type`` values and config-file sections); an
    empty section of an engine not installed is kept as it is. ``downcast_bf16`` also accepts
    Accelerate's older ``'no'``/``'yes'`` strings. An engine's option with numbered choices also
    takes a choice's number (FSDP's ``fsdp_sharding_strategy``: 1 = FULL_SHARD ... 5 =
    HYBRID_SHARD_ZERO2), and an older key an engine renamed is read like the newer one.
    """
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(
            f"{where} must hold a mapping of keys to values, got {type(config).__name__}"
        )
    known = top_keys()
    unknown = [
        str(key)
        for key, value in config.items()
        if key not in known and not _absent_engine_section(key, value)
    ]
    if len(unknown) == 1:
        raise _unknown_key_error(where, unknown[0], known)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.5)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        valid = ", ".join(sorted(known))
        raise ConfigError(f"unknown keys in {where}: {', '.join(hints)}. Valid keys: {valid}.")
    engine_sections = sections()
    result: dict[str, Any] = {}
    for key, value in config.items():
        if key not in known:  # an empty section of an engine not installed
            result[key] = value
            continue
        try:
            value = coerce(where, key, value, known[key])
        except ConfigError as error:
            if key != "distributed_type":
                raise
            from accel_launch.launch.engines import ENGINE_HINT

            raise ConfigError(f"{error} {ENGINE_HINT}") from None
        if key in UNSUPPORTED_SECTIONS and value:
            raise ConfigError(
                f"{where}: '{key}' is not supported by accel (out of scope); remove the section "
                "or leave it empty."
            )
        if key in engine_sections and value:
            section = engine_sections[key]
            checked = {}
            for sub_key, sub_value in value.items():
                if sub_key not in section:
                    raise _unknown_key_error(where, str(sub_key), section, key)
                checked[sub_key] = coerce(where, f"{key}.{sub_key}", sub_value, section[sub_key])
            value = checked
        result[key] = value
    return result
