"""Hugging Face Accelerate's names for the launch variables, read when ours are not set.

A job set up for Accelerate (``accelerate launch``, a cluster script, ``transformers``'
``TrainingArguments``) exports ``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_USE_DEEPSPEED``,
``ACCELERATE_DEEPSPEED_ZERO_STAGE``, ``FSDP_SHARDING_STRATEGY`` and so on. :func:`resolve` turns
them into our ``ACCEL_*`` variables before :class:`~accel_ops.LaunchEnvironment` parses them, so
such a job runs unchanged. The rule is per variable: our spelling wins, Accelerate's is read only
when ours is unset. Every correspondence is in the tables below (``ALIASES``, ``STRATEGY_FLAGS``,
``STRATEGY_CONFIG_VARIABLES``); docs/reference/environment.md lists them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from accel_base.env_values import LaunchEnvironmentError, parse_bool
from accel_ops.constants import FSDP_SHARDING_STRATEGY

# Our variable -> Accelerate's spelling of the same variable (same values).
ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "ACCEL_USE_CPU": "ACCELERATE_USE_CPU",
        "ACCEL_MIXED_PRECISION": "ACCELERATE_MIXED_PRECISION",
        "ACCEL_DEBUG_MODE": "ACCELERATE_DEBUG_MODE",
        "ACCEL_DYNAMO_BACKEND": "ACCELERATE_DYNAMO_BACKEND",
        "ACCEL_DYNAMO_MODE": "ACCELERATE_DYNAMO_MODE",
        "ACCEL_DYNAMO_USE_FULLGRAPH": "ACCELERATE_DYNAMO_USE_FULLGRAPH",
        "ACCEL_DYNAMO_USE_DYNAMIC": "ACCELERATE_DYNAMO_USE_DYNAMIC",
        "ACCEL_GRADIENT_ACCUMULATION_STEPS": "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
        "ACCEL_LOG_LEVEL": "ACCELERATE_LOG_LEVEL",
        "ACCEL_ENABLE_RICH": "ACCELERATE_ENABLE_RICH",
        "ACCEL_TORCH_DEVICE": "ACCELERATE_TORCH_DEVICE",
    }
)

# ``ACCEL_STRATEGY`` when unset: the strategy whose Accelerate flag is true (at most one may be).
# ``megatron_lm`` is not a strategy accel has, so accel-core refuses it, naming the known ones.
STRATEGY_FLAGS: tuple[tuple[str, str], ...] = (
    ("ACCELERATE_USE_DEEPSPEED", "deepspeed"),
    ("ACCELERATE_USE_FSDP", "fsdp"),
    ("ACCELERATE_USE_MEGATRON_LM", "megatron_lm"),
)

_Parse = Callable[[str], object]


def _text(text: str) -> object:
    return text.strip()


def _optional_text(text: str) -> object:
    """Accelerate writes ``none`` (and leaves ``auto``) for "not given": the key is left out."""
    value = text.strip()
    return None if value.lower() in ("", "none", "auto") else value


def _lower(text: str) -> object:
    return text.strip().lower()


def _int(text: str) -> object:
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("an integer") from None


def _float(text: str) -> object:
    if text.strip().lower() in ("auto", "none"):
        return None
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("a number, e.g. 1.0") from None


def _bool_or_name(text: str) -> object:
    try:
        return parse_bool(text)
    except ValueError:
        return text.strip()  # FSDP 1 takes a sharding strategy name here


def _sharding_strategy(text: str) -> object:
    value = text.strip()
    if value.isdigit() and 1 <= int(value) <= len(FSDP_SHARDING_STRATEGY):
        # Older Accelerate configs number the strategies from 1 (1 = FULL_SHARD).
        return FSDP_SHARDING_STRATEGY[int(value) - 1]
    return value


# ``ACCEL_STRATEGY_CONFIG`` when unset, for the strategy in use: its keys (those of the config
# file's ``deepspeed_config`` / ``fsdp_config`` sections) read from Accelerate's variables.
STRATEGY_CONFIG_VARIABLES: Mapping[str, Mapping[str, tuple[str, _Parse]]] = MappingProxyType(
    {
        "deepspeed": {
            "deepspeed_config_file": ("ACCELERATE_DEEPSPEED_CONFIG_FILE", _optional_text),
            "zero_stage": ("ACCELERATE_DEEPSPEED_ZERO_STAGE", _int),
            "offload_optimizer_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", _lower),
            "offload_param_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", _lower),
            "offload_optimizer_nvme_path": (
                "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
                _optional_text,
            ),
            "offload_param_nvme_path": (
                "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
                _optional_text,
            ),
            # read after the aliases: ACCEL_GRADIENT_ACCUMULATION_STEPS, else Accelerate's name
            "gradient_accumulation_steps": ("ACCEL_GRADIENT_ACCUMULATION_STEPS", _int),
            "gradient_clipping": ("ACCELERATE_GRADIENT_CLIPPING", _float),
            "zero3_init_flag": ("ACCELERATE_DEEPSPEED_ZERO3_INIT", parse_bool),
            "zero3_save_16bit_model": ("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", parse_bool),
            "deepspeed_moe_layer_cls_names": (
                "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
                _optional_text,
            ),
        },
        "fsdp": {
            "fsdp_version": ("FSDP_VERSION", _int),
            "fsdp_sharding_strategy": ("FSDP_SHARDING_STRATEGY", _sharding_strategy),
            "fsdp_reshard_after_forward": ("FSDP_RESHARD_AFTER_FORWARD", _bool_or_name),
            "fsdp_offload_params": ("FSDP_OFFLOAD_PARAMS", parse_bool),
            "fsdp_min_num_params": ("FSDP_MIN_NUM_PARAMS", _int),
            "fsdp_auto_wrap_policy": ("FSDP_AUTO_WRAP_POLICY", _text),
            "fsdp_transformer_layer_cls_to_wrap": ("FSDP_TRANSFORMER_CLS_TO_WRAP", _optional_text),
            "fsdp_backward_prefetch": ("FSDP_BACKWARD_PREFETCH", _text),
            "fsdp_state_dict_type": ("FSDP_STATE_DICT_TYPE", _text),
            "fsdp_forward_prefetch": ("FSDP_FORWARD_PREFETCH", parse_bool),
            "fsdp_use_orig_params": ("FSDP_USE_ORIG_PARAMS", parse_bool),
            "fsdp_cpu_ram_efficient_loading": ("FSDP_CPU_RAM_EFFICIENT_LOADING", parse_bool),
            "fsdp_sync_module_states": ("FSDP_SYNC_MODULE_STATES", parse_bool),
            "fsdp_activation_checkpointing": ("FSDP_ACTIVATION_CHECKPOINTING", parse_bool),
        },
        "xla": {"downcast_bf16": ("ACCELERATE_DOWNCAST_BF16", parse_bool)},
    }
)


class SpelledEnvironment(NamedTuple):
    """The environment with our variables filled in from Accelerate's where ours were unset."""

    values: Mapping[str, str]
    """Every variable of the input, plus the ``ACCEL_*`` ones derived from Accelerate's."""
    sources: Mapping[str, str]
    """For each derived ``ACCEL_*`` variable, the Accelerate variable(s) it was read from."""


def resolve(environ: Mapping[str, str]) -> SpelledEnvironment:
    """Fill ``ACCEL_*`` variables from Accelerate's spelling (tables above); ours win.

    Raises :class:`~accel_ops.LaunchEnvironmentError` naming the Accelerate variable whose value
    can't be read, or both flags when ``ACCELERATE_USE_DEEPSPEED`` and ``ACCELERATE_USE_FSDP``
    are both true.
    """
    values = dict(environ)
    sources: dict[str, str] = {}
    for ours, theirs in ALIASES.items():
        if ours not in values and theirs in values:
            values[ours] = values[theirs]
            sources[ours] = theirs
    if "ACCEL_STRATEGY" not in values:
        chosen = [(flag, name) for flag, name in STRATEGY_FLAGS if _flag(values, flag)]
        if len(chosen) > 1:
            flags = " and ".join(f"{flag}={values[flag]!r}" for flag, _ in chosen)
            raise LaunchEnvironmentError(
                f"{flags} ask for {len(chosen)} strategies at once; set only one of them to true "
                "(or set ACCEL_STRATEGY, which wins)"
            )
        if chosen:
            values["ACCEL_STRATEGY"], sources["ACCEL_STRATEGY"] = chosen[0][1], chosen[0][0]
    strategy = values.get("ACCEL_STRATEGY", "").strip().lower()
    table = STRATEGY_CONFIG_VARIABLES.get(strategy)
    if table and "ACCEL_STRATEGY_CONFIG" not in values:
        config, read_from = _strategy_config(values, sources, table)
        if config:
            values["ACCEL_STRATEGY_CONFIG"] = json.dumps(config, sort_keys=True)
            sources["ACCEL_STRATEGY_CONFIG"] = ", ".join(read_from)
    return SpelledEnvironment(MappingProxyType(values), MappingProxyType(sources))


def read_accel_variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of our variable ``name``, else of its Accelerate spelling (``ALIASES``), else None.

    For variables read outside :class:`~accel_ops.LaunchEnvironment`, e.g. ``ACCEL_LOG_LEVEL``
    (Accelerate's ``ACCELERATE_LOG_LEVEL``).
    """
    env = os.environ if environ is None else environ
    if name in env:
        return env[name]
    twin = ALIASES.get(name)
    return env.get(twin) if twin is not None else None


def _flag(values: Mapping[str, str], name: str) -> bool:
    text = values.get(name)
    if text is None:
        return False
    try:
        return parse_bool(text)
    except ValueError as error:
        raise LaunchEnvironmentError(f"{name}={text!r} is not valid; expected {error}") from None


def _strategy_config(
    values: Mapping[str, str],
    sources: Mapping[str, str],
    table: Mapping[str, tuple[str, _Parse]],
) -> tuple[dict[str, object], list[str]]:
    config: dict[str, object] = {}
    read_from: list[str] = []
    for key, (variable, parse) in table.items():
        text = values.get(variable)
        if text is None:
            continue
        label = sources.get(variable, variable)
        try:
            value = parse(text)
        except ValueError as error:
            raise LaunchEnvironmentError(
                f"{label}={text!r} is not valid; expected {error}"
            ) from None
        if value is not None:
            config[key] = value
            read_from.append(label)
    return config, read_from
