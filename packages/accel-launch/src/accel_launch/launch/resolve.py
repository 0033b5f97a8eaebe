"""Resolve the launch configuration: flag > environment > config file > default, source kept.

:func:`resolve` is pure: it takes the parsed flags, a copy of the environment and the loaded config
file, and returns a :class:`LaunchPlan` that says what to start and why each value is what it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_launch.errors import AccelLaunchError
from accel_launch.launch.options import OPTIONS, parse_bool
from accel_launch.launch.slurm import slurm_layout

STRATEGY_OF_TYPE = {
    "NO": None,
    "MULTI_CPU": "ddp",
    "MULTI_GPU": "ddp",
    "DEEPSPEED": "deepspeed",
    "FSDP": "fsdp",
    "XLA": "xla",
}
_STRATEGY_SECTION = {"DEEPSPEED": "deepspeed", "FSDP": "fsdp", "XLA": "xla"}


@dataclass(frozen=True)
class Value:
    """A resolved value and its source: flag, env NAME, config file PATH or default."""

    value: Any
    source: str


@dataclass
class LaunchPlan:
    """Everything ``accel launch`` decided, before anything starts."""

    values: dict[str, Value]
    distributed_type: Value
    nproc_per_node: int
    strategy_config: dict[str, Any] = field(default_factory=dict)
    config_file: str | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * int(self["num_machines"])

    @property
    def strategy(self) -> str | None:
        return STRATEGY_OF_TYPE[self.distributed_type.value]


def _get_path(config: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = config
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _from_env(kind: str, name: str, text: str, choices: tuple[Any, ...] | None) -> Any:
    try:
        if kind in ("flag", "bool"):
            return parse_bool(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise AccelLaunchError(
            f"environment variable {name}={text!r} is not a valid {kind}"
        ) from None
    if choices is not None and _canonical(text, choices) is None:
        raise AccelLaunchError(
            f"environment variable {name}={text!r} is not allowed; expected one of "
            + ", ".join(map(str, choices))
        )
    return text


def _canonical(value: Any, choices: tuple[Any, ...]) -> Any:
    for choice in choices:
        if str(value).lower() == str(choice).lower():
            return choice
    return None


def _resolve_values(
    flags: argparse.Namespace, environ: Mapping[str, str], config: Mapping[str, Any], where: str
) -> dict[str, Value]:
    slurm = slurm_layout(environ)
    values: dict[str, Value] = {}
    for option in OPTIONS:
        given = getattr(flags, option.name, None)
        if given is not None:
            values[option.name] = Value(given, "flag")
            continue
        if option.env and environ.get(option.env, "") != "":
            parsed = _from_env(option.kind, option.env, environ[option.env], option.choices)
            values[option.name] = Value(parsed, f"env {option.env}")
            continue
        if option.name in slurm:
            value, variable = slurm[option.name]
            values[option.name] = Value(value, f"env {variable}")
            continue
        from_file = _get_path(config, option.config_key) if option.config_key else None
        if from_file is not None:
            if option.choices is not None:
                from_file = _canonical(from_file, option.choices)
            values[option.name] = Value(from_file, f"config file {where}")
            continue
        values[option.name] = Value(option.default, "default")
    return values


def _distributed_type(values: dict[str, Value], config: Mapping[str, Any], where: str) -> Value:
    for flag, kind in (
        ("use_deepspeed", "DEEPSPEED"),
        ("use_fsdp", "FSDP"),
        ("use_xla", "XLA"),
        ("multi_gpu", "MULTI_GPU"),
    ):
        if values[flag].value:
            return Value(kind, values[flag].source)
    if config.get("distributed_type"):
        return Value(config["distributed_type"], f"config file {where}")
    return Value("NO", "default")


def _visible_gpus(gpu_ids: Any) -> int:
    from accel_launch.devices import count_cuda_devices

    if gpu_ids not in (None, "", "all"):
        return len([part for part in str(gpu_ids).split(",") if part.strip()])
    return count_cuda_devices()


def resolve(
    flags: argparse.Namespace,
    environ: Mapping[str, str],
    config: Mapping[str, Any],
    config_file: str | None = None,
) -> LaunchPlan:
    """Decide every launch value and its source; raise AccelLaunchError for inconsistent ones."""
    where = config_file or "(none)"
    values = _resolve_values(flags, environ, config, where)
    kind = _distributed_type(values, config, where)
    machines = int(values["num_machines"].value)
    if machines < 1:
        raise AccelLaunchError(f"--num_machines must be >= 1, got {machines}")
    rank = int(values["machine_rank"].value)
    if not 0 <= rank < machines:
        raise AccelLaunchError(
            f"--machine_rank {rank} is out of range for --num_machines {machines} "
            f"(expected 0..{machines - 1})"
        )
    if machines > 1 and values["main_process_ip"].source == "default":
        raise AccelLaunchError(
            f"--num_machines {machines} needs --main_process_ip (the address of the machine of "
            "rank 0), or main_process_ip in the config file"
        )
    if values["num_processes"].value is None:
        gpus = _visible_gpus(values["gpu_ids"].value)
        if kind.value == "MULTI_GPU" and gpus == 0 and not values["cpu"].value:
            raise AccelLaunchError(
                f"distributed type MULTI_GPU ({kind.source}) found no GPU on this machine and no "
                "--num_processes was given; pass --num_processes N, and --cpu to run on CPU"
            )
        per_machine = gpus if kind.value == "MULTI_GPU" and gpus > 0 else 1
        values["num_processes"] = Value(per_machine * machines, "default")
    total = int(values["num_processes"].value)
    if total < 1 or total % machines:
        raise AccelLaunchError(
            f"--num_processes {total} is the total over all machines and must be a positive "
            f"multiple of --num_machines {machines}"
        )
    use_cpu = bool(values["cpu"].value)
    if kind.value == "MULTI_GPU" and use_cpu:
        kind = Value("MULTI_CPU", values["cpu"].source)
    if kind.value == "NO" and total > 1:
        multi = (
            "MULTI_CPU" if use_cpu or _visible_gpus(values["gpu_ids"].value) == 0 else "MULTI_GPU"
        )
        kind = Value(multi, values["num_processes"].source)
    if kind.value == "MULTI_CPU" and not use_cpu:
        values["cpu"] = Value(True, f"distributed type {kind.value}")
    plan = LaunchPlan(values, kind, total // machines, config_file=config_file)
    plan.strategy_config = _strategy_config(plan, config)
    return plan


def _strategy_config(plan: LaunchPlan, config: Mapping[str, Any]) -> dict[str, Any]:
    group = _STRATEGY_SECTION.get(plan.distributed_type.value)
    if group is None:
        return {}
    section = {"deepspeed": "deepspeed_config", "fsdp": "fsdp_config"}.get(group)
    result: dict[str, Any] = dict(config.get(section) or {}) if section else {}
    for option in OPTIONS:
        if option.group == group and plan.values[option.name].value is not None:
            key = option.config_key[-1] if option.config_key else option.name
            result[key] = plan.values[option.name].value
    return result
