"""The keys a config file may hold, their types and allowed values, and the check enforcing them.

The keys are the ones Hugging Face Accelerate's ``accelerate config`` writes, so its files load as
they are. An unknown key is an error naming the nearest valid key; a wrong value is an error naming
the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_launch.errors import ConfigError

DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP", "XLA")
MIXED_PRECISIONS = ("no", "fp16", "bf16")
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
FSDP_SHARDING_STRATEGIES = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
)
FSDP_AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
FSDP_BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
FSDP_STATE_DICT_TYPES = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
DEEPSPEED_LAUNCHERS = ("pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm")


@dataclass(frozen=True)
class Field:
    """One config key: its kind (bool, int, float, str, list, dict, any) and allowed values."""

    kind: str
    choices: tuple[Any, ...] | None = None
    nullable: bool = True
    help: str = ""


def _f(kind: str, choices: tuple[Any, ...] | None = None, help: str = "") -> Field:
    return Field(kind, choices, True, help)


DYNAMO_KEYS: dict[str, Field] = {
    "dynamo_backend": _f("str", tuple(b.upper() for b in DYNAMO_BACKENDS), "torch.compile backend"),
    "dynamo_mode": _f("str", DYNAMO_MODES, "torch.compile mode"),
    "dynamo_use_fullgraph": _f("bool", help="compile the whole model as one graph"),
    "dynamo_use_dynamic": _f("bool", help="dynamic shapes"),
    "dynamo_use_regional_compilation": _f("bool", help="compile repeated blocks once"),
}

DEEPSPEED_KEYS: dict[str, Field] = {
    "deepspeed_config_file": _f(
        "str", help="a DeepSpeed JSON config; other keys then come from it"
    ),
    "zero_stage": _f("int", (0, 1, 2, 3), "ZeRO stage"),
    "offload_optimizer_device": _f("str", OFFLOAD_DEVICES, "where optimizer states live"),
    "offload_param_device": _f("str", OFFLOAD_DEVICES, "where parameters live (stage 3)"),
    "offload_optimizer_nvme_path": _f("str", help="NVMe folder for optimizer offload"),
    "offload_param_nvme_path": _f("str", help="NVMe folder for parameter offload"),
    "gradient_accumulation_steps": _f("int", help="steps per optimizer step"),
    "gradient_clipping": _f("float", help="gradient norm clipping value"),
    "zero3_init_flag": _f("bool", help="build large models sharded (zero.Init)"),
    "zero3_save_16bit_model": _f("bool", help="save a 16-bit model under stage 3"),
    "deepspeed_hostfile": _f("str", help="DeepSpeed hostfile (DeepSpeed's own launchers only)"),
    "deepspeed_exclusion_filter": _f("str", help="DeepSpeed exclusion filter"),
    "deepspeed_inclusion_filter": _f("str", help="DeepSpeed inclusion filter"),
    "deepspeed_multinode_launcher": _f("str", DEEPSPEED_LAUNCHERS, "multi-machine launcher"),
    "deepspeed_moe_layer_cls_names": _f("str", help="comma-separated MoE layer class names"),
}

FSDP_KEYS: dict[str, Field] = {
    "fsdp_version": _f("int", (1, 2), "FSDP API version"),
    "fsdp_sharding_strategy": _f("str", FSDP_SHARDING_STRATEGIES, "how FSDP 1 shards (older key)"),
    "fsdp_reshard_after_forward": _f("any", help="FSDP 2: true/false; FSDP 1: a sharding strategy"),
    "fsdp_offload_params": _f("bool", help="offload parameters and gradients to CPU"),
    "fsdp_min_num_params": _f("int", help="minimum parameters per unit for SIZE_BASED_WRAP"),
    "fsdp_auto_wrap_policy": _f("str", FSDP_AUTO_WRAP_POLICIES, "how modules are wrapped"),
    "fsdp_transformer_layer_cls_to_wrap": _f("str", help="comma-separated layer class names"),
    "fsdp_backward_prefetch": _f("str", FSDP_BACKWARD_PREFETCH, "backward prefetch"),
    "fsdp_backward_prefetch_policy": _f("str", FSDP_BACKWARD_PREFETCH, "older name of the above"),
    "fsdp_state_dict_type": _f("str", FSDP_STATE_DICT_TYPES, "checkpoint layout"),
    "fsdp_forward_prefetch": _f("bool", help="forward prefetch"),
    "fsdp_use_orig_params": _f("bool", help="keep original parameters (FSDP 1)"),
    "fsdp_cpu_ram_efficient_loading": _f("bool", help="load weights on rank 0 only"),
    "fsdp_sync_module_states": _f("bool", help="broadcast rank 0's weights at wrap time"),
    "fsdp_activation_checkpointing": _f("bool", help="activation checkpointing"),
}

#: Keys Accelerate knows and accel accepts only when empty (features out of accel's scope).
UNSUPPORTED_SECTIONS = ("megatron_lm_config", "parallelism_config", "mpirun_config", "ipex_config")

TOP_KEYS: dict[str, Field] = {
    "compute_environment": _f("str", ("LOCAL_MACHINE",), "where the job runs"),
    "distributed_type": _f("str", DISTRIBUTED_TYPES, "how processes cooperate"),
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
    "same_network": _f("bool", help="all machines on one local network"),
    "main_training_function": _f("str", help="function to call (TPU launches only)"),
    "enable_cpu_affinity": _f("bool", help="pin processes to CPU cores near their GPU"),
    "downcast_bf16": _f("bool", help="XLA: store float64 tensors as bfloat16 too"),
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
    "deepspeed_config": _f("dict", help="DeepSpeed options (section below)"),
    "fsdp_config": _f("dict", help="FSDP options (section below)"),
    **{
        name: _f("dict", help="out of scope: accepted only when empty")
        for name in UNSUPPORTED_SECTIONS
    },
}

SECTIONS: dict[str, dict[str, Field]] = {
    "dynamo_config": DYNAMO_KEYS,
    "deepspeed_config": DEEPSPEED_KEYS,
    "fsdp_config": FSDP_KEYS,
}

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off", ""}
_FSDP1_STRATEGY_NUMBERS = dict(enumerate(FSDP_SHARDING_STRATEGIES, start=1))


def _unknown_key_error(
    where: str, key: str, known: Mapping[str, Field], section: str = ""
) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.5)
    prefix = f"{section}." if section else ""
    hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
    return ConfigError(
        f"unknown key '{prefix}{key}' in {where}.{hint} Valid keys"
        f"{' of ' + section if section else ''}: {', '.join(sorted(known))}."
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
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
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
        if spec.choices is None and number < 0:
            raise _bad_value(where, key, value, "an integer >= 0")
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
            key.endswith("fsdp_sharding_strategy")
            and isinstance(value, int)
            and not isinstance(value, bool)
        ):
            value = _FSDP1_STRATEGY_NUMBERS.get(value, value)
        if key == "gpu_ids" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
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


def validate(config: object, where: str = "config file") -> dict[str, Any]:
    """Check a loaded config mapping; return a canonical copy. Raises ConfigError on any problem.

    ``where`` names the file in messages. ``downcast_bf16`` also accepts Accelerate's older
    ``'no'``/``'yes'`` strings. ``fsdp_sharding_strategy`` also accepts Accelerate's older numbers
    (1 = FULL_SHARD ... 5 = HYBRID_SHARD_ZERO2).
    """
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(
            f"{where} must hold a mapping of keys to values, got {type(config).__name__}"
        )
    unknown = [str(key) for key in config if key not in TOP_KEYS]
    if len(unknown) == 1:
        raise _unknown_key_error(where, unknown[0], TOP_KEYS)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, list(TOP_KEYS), n=1, cutoff=0.5)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        valid = ", ".join(sorted(TOP_KEYS))
        raise ConfigError(f"unknown keys in {where}: {', '.join(hints)}. Valid keys: {valid}.")
    result: dict[str, Any] = {}
    for key, value in config.items():
        spec = TOP_KEYS[key]
        value = coerce(where, key, value, spec)
        if key in UNSUPPORTED_SECTIONS and value:
            raise ConfigError(
                f"{where}: '{key}' is not supported by accel (out of scope); remove the section "
                "or leave it empty."
            )
        if key in SECTIONS and value:
            section = SECTIONS[key]
            checked = {}
            for sub_key, sub_value in value.items():
                if sub_key not in section:
                    raise _unknown_key_error(where, str(sub_key), section, key)
                checked[sub_key] = coerce(where, f"{key}.{sub_key}", sub_value, section[sub_key])
            value = checked
        result[key] = value
    return result
