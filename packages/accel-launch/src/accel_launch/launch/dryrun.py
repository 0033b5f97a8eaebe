"""``accel launch --dry-run``: the resolved configuration, each value's source, the environment."""

from __future__ import annotations

import argparse
import shlex

from accel_launch.launch import agent, engine_settings, parallelism
from accel_launch.launch.resolve import LaunchPlan, Value
from accel_launch.launch.workerenv import torch_environment


def format_plan(
    plan: LaunchPlan, env: dict[str, str], port: Value | None, args: argparse.Namespace
) -> str:
    """The text ``--dry-run`` prints."""
    rows: list[tuple[str, object, str]] = [
        ("distributed_type", plan.distributed_type.value, plan.distributed_type.source),
        ("processes on this machine", plan.nproc_per_node, "num_processes / num_machines"),
        ("world size", plan.world_size, "num_processes"),
    ]
    parallelism_on = bool(plan.values["use_parallelism_config"].value)
    for name, value in plan.values.items():
        if name == "main_process_port" and port is not None:
            value = port
        if name == "strategy" and value.value is None and parallelism_on:
            value = Value("(the workers choose)", "parallelism_config's dimensions")
        if value.value is None:
            continue
        if name.startswith(parallelism.PREFIX) and not parallelism_on:
            continue  # ParallelismConfig is off: its rows would only repeat defaults
        rows.append((name, value.value, value.source))
    width = max(len(name) for name, _, _ in rows)
    value_width = max(len(str(value)) for _, value, _ in rows)
    lines = ["accel launch --dry-run: nothing was started.", ""]
    lines.append(f"config file: {plan.config_file or '(none)'}")
    lines.append("")
    lines.append("resolved configuration (value, source):")
    lines += [
        f"  {name:<{width}}  {value!s:<{value_width}}  {source}" for name, value, source in rows
    ]
    if plan.strategy_config:
        lines += ["", f"strategy config: {env.get('ACCEL_STRATEGY_CONFIG')}"]
    rows = engine_settings.check(plan)
    if rows is not None:
        lines += ["", *engine_settings.format_rows(plan, rows)]
    lines += ["", "worker environment (set by accel launch):"]
    lines += [f"  {key}={value}" for key, value in sorted(env.items())]
    if port is not None:
        lines += ["", "set per process by torch's elastic agent:"]
        lines += [
            f"  {key}={value}" for key, value in torch_environment(plan, int(port.value)).items()
        ]
    build = agent.elastic_command if plan.world_size > 1 else agent.worker_command
    command = build(args.training_script, args.training_script_args, args.module, args.no_python)
    how = "each process runs" if plan.world_size > 1 else "the process runs (in place)"
    lines += ["", f"{how}: {shlex.join(command)}"]
    return "\n".join(lines)
