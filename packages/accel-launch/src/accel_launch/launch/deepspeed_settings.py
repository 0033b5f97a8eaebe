"""The DeepSpeed settings ``accel launch`` can see, with the source of each, checked before start.

The launcher knows its flags, its variables, the config file's ``deepspeed_config`` section and the
DeepSpeed JSON file (``deepspeed_config_file``). It lists their values with their sources for
``--dry-run``, and refuses a key that the JSON file and the launch give different values, naming
both, before anything starts. What only the training processes know (the script's
``DeepSpeedPlugin(...)`` arguments, the Accelerator's ``"auto"`` values) is resolved and checked
again in each process by accel-backends (``DeepSpeedPlugin.describe()``), which reads the sources
written here in ``ACCEL_STRATEGY_CONFIG_SOURCES``. accel-launch does not import accel-backends:
the key table below is the launcher's own copy of the launch keys' DeepSpeed names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from accel_launch.errors import AccelLaunchError
from accel_launch.launch.options import OPTIONS
from accel_launch.launch.resolve import LaunchPlan

#: Launch key (config file ``deepspeed_config`` key, flag name) -> its dotted DeepSpeed key.
DEEPSPEED_KEYS = {
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "offload_param_nvme_path": "zero_optimization.offload_param.nvme_path",
    "offload_optimizer_nvme_path": "zero_optimization.offload_optimizer.nvme_path",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}

PENDING = "auto: filled in each process by the Accelerator (DeepSpeedPlugin.describe() says how)"
NOT_SHOWN = (
    "keys not listed: DeepSpeedPlugin's defaults and the script's DeepSpeedPlugin(...) arguments; "
    "each process resolves and checks them again before its process group starts"
)


class DeepSpeedSettingsConflict(AccelLaunchError, ValueError):
    """The DeepSpeed JSON file and the launch give one key different values."""


@dataclass(frozen=True)
class Row:
    """One DeepSpeed setting: dotted key, value, where it came from."""

    key: str
    value: object
    source: str


def strategy_config_sources(plan: LaunchPlan) -> dict[str, str]:
    """Where each key of ``plan.strategy_config`` came from: ``--flag``, a variable, or the
    config file's section (what ``ACCEL_STRATEGY_CONFIG_SOURCES`` holds)."""
    by_key = {}
    for option in OPTIONS:
        if option.config_key and len(option.config_key) == 2:
            by_key[option.config_key[1]] = option
    section = {"deepspeed": "deepspeed_config", "fsdp": "fsdp_config"}.get(plan.strategy or "")
    sources = {}
    for key in plan.strategy_config:
        option = by_key.get(key)
        found = plan.values.get(option.name) if option else None
        if option is not None and found is not None and found.source == "flag":
            sources[key] = f"--{option.name}"
        elif found is not None and found.source.startswith("env "):
            sources[key] = found.source.removeprefix("env ")
        else:
            sources[key] = f"config file {plan.config_file}: {section}.{key}"
    return sources


def deepspeed_rows(plan: LaunchPlan) -> list[Row]:
    """The DeepSpeed settings of ``plan`` by dotted key, with their sources.

    Raises:
        DeepSpeedSettingsConflict: for each key the JSON file and the launch give different values
            (one error listing all of them, each with both sources and values).
        AccelLaunchError: for a ``deepspeed_config_file`` that can't be read.
    """
    sources = strategy_config_sources(plan)
    launch = {
        DEEPSPEED_KEYS[key]: Row(DEEPSPEED_KEYS[key], value, sources[key])
        for key, value in plan.strategy_config.items()
        if key in DEEPSPEED_KEYS and not (key.endswith("nvme_path") and value == "none")
    }
    path = plan.strategy_config.get("deepspeed_config_file")
    if path in (None, "", "none"):
        return list(launch.values())
    from_file = dict(_leaves(_read_json(str(path), sources.get("deepspeed_config_file", ""))))
    rows: list[Row] = []
    disagreements: list[tuple[str, str]] = []
    for key, value in from_file.items():
        given = launch.pop(key, None)
        if given is not None and value != "auto":
            if not _same(value, given.value):
                disagreements.append(
                    (key, f"{value!r} from {path}: {key}, and {given.value!r} from {given.source}")
                )
            rows.append(Row(key, value, f"{path}: {key}; same in {given.source}"))
        elif given is not None:
            rows.append(Row(key, given.value, f"{given.source} (fills 'auto' of {path})"))
        elif value == "auto":
            rows.append(Row(key, "auto (pending)", PENDING))
        elif value is not None:
            rows.append(Row(key, value, f"{path}: {key}"))
    if len(disagreements) == 1:
        key, text = disagreements[0]
        raise DeepSpeedSettingsConflict(
            f"DeepSpeed setting {key} is given twice with different values: {text}. Keep one of "
            "them, or make them equal."
        )
    if disagreements:
        listed = "\n".join(f"- {key}: {text}" for key, text in disagreements)
        message = (
            f"{len(disagreements)} DeepSpeed settings are given twice with different values:"
            f"\n{listed}\nKeep one source for each, or make them equal."
        )
        raise DeepSpeedSettingsConflict(message)
    return rows + list(launch.values())


def format_deepspeed_rows(rows: list[Row]) -> list[str]:
    """The ``--dry-run`` lines of the DeepSpeed settings."""
    width = max((len(row.key) for row in rows), default=3)
    value_width = max((len(str(row.value)) for row in rows), default=5)
    lines = ["DeepSpeed settings (key, value, source):"]
    lines += [f"  {r.key:<{width}}  {r.value!s:<{value_width}}  {r.source}" for r in rows]
    lines.append(f"  ({NOT_SHOWN})")
    return lines


def sources_variable(plan: LaunchPlan) -> dict[str, str]:
    """``ACCEL_STRATEGY_CONFIG_SOURCES`` for the worker environment (empty without a strategy
    config)."""
    if not plan.strategy_config:
        return {}
    return {"ACCEL_STRATEGY_CONFIG_SOURCES": json.dumps(strategy_config_sources(plan))}


def _read_json(path: str, source: str) -> Mapping[str, object]:
    where = f"deepspeed_config_file {path!r}" + (f" ({source})" if source else "")
    if not os.path.isfile(path):
        raise AccelLaunchError(f"{where} does not exist")
    try:
        with open(path, encoding="utf-8") as file:
            loaded = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        raise AccelLaunchError(f"{where} can't be read as JSON: {error}") from None
    if not isinstance(loaded, dict):
        raise AccelLaunchError(f"{where} must hold a JSON object")
    return loaded


def _leaves(config: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _same(first: object, second: object) -> bool:
    if isinstance(first, bool) or isinstance(second, bool):
        return first is second
    if isinstance(first, (int, float)) and isinstance(second, (int, float)):
        return float(first) == float(second)
    return first == second
