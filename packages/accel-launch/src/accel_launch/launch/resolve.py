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
from accel_launch.launch import engines, parallelism
from accel_launch.launch.options import Option, launch_options, parse_bool, parse_machines
from accel_launch.launch.slurm import slurm_layout


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
        """The strategy the workers run (``ACCEL_STRATEGY``); ``None`` for one plain process."""
        return self.values["strategy"].value


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
        if kind == "machines":
            return parse_machines(text)
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
    for option in launch_options():
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
    for option in launch_options():
        _check_minimum(option, values[option.name])
    return values


def _check_minimum(option: Option, value: Value) -> None:
    """Raise AccelLaunchError when an option with a minimum has a smaller (or no integer) value;
    argparse checks the flags of ``accel launch``, this also those of other namespaces."""
    if option.minimum is None or value.value is None:
        return
    try:
        allowed = not isinstance(value.value, bool) and int(value.value) >= option.minimum
    except (TypeError, ValueError):
        allowed = False
    if not allowed:
        raise AccelLaunchError(
            f"--{option.name} {value.value!r} ({value.source}) is not allowed; expected an "
            f"integer >= {option.minimum}"
        )


def _parallelism_switch(values: dict[str, Value], config: Mapping[str, Any], where: str) -> Value:
    """Whether the workers get ParallelismConfig's variables: ``--use_parallelism_config``, else
    any ``--parallelism_config_*`` flag, else a non-empty ``parallelism_config`` section."""
    switch = values["use_parallelism_config"]
    if switch.source != "default":
        return switch
    for name, value in values.items():
        if name.startswith(parallelism.PREFIX) and value.source == "flag":
            return Value(True, f"implied by --{name}")
    if config.get(parallelism.SECTION):
        return Value(True, f"config file {where}: {parallelism.SECTION} section")
    return switch


def _chosen_strategy(values: dict[str, Value], config: Mapping[str, Any], where: str) -> Value:
    """The strategy named by ``--strategy``, a ``--use_*`` flag or ``--multi_gpu``, by
    ``ACCEL_STRATEGY``, or by the config file's ``strategy`` or ``distributed_type``;
    ``Value(None, ...)`` when none is (one process, or the process count decides)."""
    named = values["strategy"]
    if named.value is not None:
        named = Value(engines.canonical_strategy(str(named.value), named.source), named.source)
    used = [
        (option.name, option.chooses)
        for option in launch_options()
        if option.chooses and values[option.name].value
    ]
    if named.source == "flag":
        for flag, name in used:
            if name != named.value:
                raise AccelLaunchError(
                    f"--strategy {named.value} and --{flag} (strategy {name}) choose different "
                    "strategies; pass one of them"
                )
        return named
    if used:  # a flag outranks the environment and the config file
        return Value(used[0][1], "flag")
    if values["multi_gpu"].value:
        return Value("ddp", values["multi_gpu"].source)
    kind = config.get("distributed_type")
    of_kind = engines.strategy_of_type().get(str(kind)) if kind else None
    if named.value is not None:
        from_file = named.source.startswith("config file")
        if from_file and of_kind not in (None, named.value) and kind not in engines.BUILT_IN_TYPES:
            raise AccelLaunchError(
                f"config file {where}: strategy {named.value!r} and distributed_type {kind} "
                f"(strategy {of_kind}) choose different strategies; keep one of them"
            )
        return named
    if kind:
        return Value(of_kind, f"config file {where}")
    return Value(None, "default")


def _distributed_type(
    strategy: Value, values: dict[str, Value], config: Mapping[str, Any], where: str
) -> Value:
    """The distributed type of ``strategy``, before the process count and ``--cpu`` apply."""
    kind = config.get("distributed_type")
    from_file = Value(kind, f"config file {where}")
    if strategy.value is None or strategy.value in engines.BUILT_IN_STRATEGIES:
        if values["multi_gpu"].value:
            return Value("MULTI_GPU", values["multi_gpu"].source)
        if kind in engines.BUILT_IN_TYPES and engines.BUILT_IN_TYPES[kind] == strategy.value:
            return from_file
        if strategy.value == "ddp":
            no_gpu = values["cpu"].value or _visible_gpus(values["gpu_ids"].value) == 0
            return Value("MULTI_CPU" if no_gpu else "MULTI_GPU", strategy.source)
        return Value("NO", strategy.source)
    described = engines.engine(strategy.value)
    if described is not None and described.distributed_type:
        return Value(described.distributed_type, strategy.source)
    if kind in engines.BUILT_IN_TYPES:
        return from_file
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
    values["use_parallelism_config"] = _parallelism_switch(values, config, where)
    strategy = _chosen_strategy(values, config, where)
    kind = _distributed_type(strategy, values, config, where)
    _machine_range(values)
    _preemption_signal(values)
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
    # With a ParallelismConfig and no strategy named, the workers choose: its dimensions say
    # which strategy trains over them (ddp for dp_replicate alone, fsdp for dp_shard or tp).
    left_to_workers = bool(values["use_parallelism_config"].value) and total > 1
    if strategy.value is None and kind.value in engines.BUILT_IN_TYPES and not left_to_workers:
        strategy = Value(engines.BUILT_IN_TYPES[kind.value], kind.source)
    if strategy.value == "single_device" and total > 1:
        raise AccelLaunchError(
            f"strategy single_device ({strategy.source}) runs one process, but --num_processes is "
            f"{total} ({values['num_processes'].source}); use --strategy ddp, or one process"
        )
    values["strategy"] = strategy
    plan = LaunchPlan(values, kind, total // machines, config_file=config_file)
    plan.strategy_config = _strategy_config(plan, config)
    return plan


def _machine_range(values: dict[str, Value]) -> None:
    """Split ``--num_machines MIN:MAX`` into ``num_machines`` (MAX) and ``min_machines`` (MIN),
    and check ``min_machines`` against it and the rendezvous backend."""
    given = values["num_machines"]
    if isinstance(given.value, tuple):
        low, high = given.value
        values["num_machines"] = Value(high, given.source)
        values["min_machines"] = Value(low, given.source)
    elif isinstance(given.value, str):
        values["num_machines"] = Value(parse_machines(given.value), given.source)
        _machine_range(values)
        return
    high = int(values["num_machines"].value)
    if values["rdzv_backend"].value is None:
        chosen = "c10d" if high > 1 else "static"
        values["rdzv_backend"] = Value(chosen, "default")
    low_value = values["min_machines"]
    if low_value.value is None:
        values["min_machines"] = Value(high, "--num_machines")
        return
    low = int(low_value.value)
    if not 1 <= low <= high:
        raise AccelLaunchError(
            f"--min_machines {low} ({low_value.source}) must be between 1 and --num_machines {high}"
        )
    if low < high and values["rdzv_backend"].value == "static":
        raise AccelLaunchError(
            f"a range of machines ({low}:{high}) needs an elastic rendezvous: the static one "
            "waits for all of them; add --rdzv_backend c10d"
        )


def _preemption_signal(values: dict[str, Value]) -> None:
    """Canonical name of ``--preemption_signal`` (``SIGUSR1`` for ``usr1`` or ``10``; ``none``)."""
    import signal

    given = values["preemption_signal"]
    text = str(given.value).strip()
    if text.lower() in ("none", "off", "no", "false", "0", ""):
        values["preemption_signal"] = Value("none", given.source)
        return
    try:
        found = signal.Signals(int(text)) if text.isdigit() else None
    except ValueError:
        found = None
    if found is None:
        name = text.upper() if text.upper().startswith("SIG") else f"SIG{text.upper()}"
        found = getattr(signal.Signals, name, None)
    if found is None or found in (signal.SIGKILL, signal.SIGSTOP):
        raise AccelLaunchError(
            f"--preemption_signal {text!r} ({given.source}) is not a signal a process can catch; "
            "expected e.g. SIGTERM or SIGUSR1, or none"
        )
    values["preemption_signal"] = Value(found.name, given.source)


def _strategy_config(plan: LaunchPlan, config: Mapping[str, Any]) -> dict[str, Any]:
    """The chosen engine's config-file section merged with its launch options (these win)."""
    described = engines.engine(plan.strategy)
    if described is None:
        return {}
    section = described.config_section
    result: dict[str, Any] = dict(config.get(section) or {}) if section else {}
    for launch_option in described.launch_options:
        value = plan.values[launch_option.name].value
        if value is not None:
            result[launch_option.section_key] = value
    return result
