"""The launch environment: the variables ``accel launch`` sets for the processes it starts.

This is the writer's side of docs/reference/environment.md; accel-ops reads the same variables.
torch's elastic agent adds its own per process (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ...).
"""

from __future__ import annotations

import argparse
import json

from accel_launch import accelerate_alias
from accel_launch.errors import AccelLaunchError
from accel_launch.launch import engines, parallelism
from accel_launch.launch.engine_settings import sources_variable
from accel_launch.launch.options import launch_options
from accel_launch.launch.ports import free_port, is_port_in_use
from accel_launch.launch.resolve import LaunchPlan, Value

DEFAULT_MULTI_MACHINE_PORT = 29500


def _flag(value: object) -> str:
    return "true" if value else "false"


def accel_environment(plan: LaunchPlan) -> dict[str, str]:
    """The ``ACCEL_*`` variables (and ``OMP_NUM_THREADS``, ``CUDA_VISIBLE_DEVICES``) for a plan;
    with ParallelismConfig on, also ``ACCELERATE_USE_PARALLELISM_CONFIG`` and the
    ``PARALLELISM_CONFIG_*`` variables."""
    env = {
        "ACCEL_USE_CPU": _flag(plan["cpu"]),
        "ACCEL_MIXED_PRECISION": str(plan["mixed_precision"]),
        "ACCEL_DEBUG_MODE": _flag(plan["debug"]),
        "ACCEL_DYNAMO_BACKEND": str(plan["dynamo_backend"]).lower(),
        "ACCEL_NUM_MACHINES": str(plan["num_machines"]),
    }
    # what the workers need to survive faults (accel_core.preemption, accel_ops.group_join)
    env["ACCEL_PREEMPTION_SIGNAL"] = str(plan["preemption_signal"])
    env["ACCEL_JOIN_TIMEOUT"] = str(plan["join_timeout"])
    if plan["project_dir"]:
        env["ACCEL_PROJECT_DIR"] = str(plan["project_dir"])
    if plan["auto_resume"]:
        env["ACCEL_AUTO_RESUME"] = "true"
    if env["ACCEL_DYNAMO_BACKEND"] != "no":
        env["ACCEL_DYNAMO_MODE"] = str(plan["dynamo_mode"])
        env["ACCEL_DYNAMO_USE_FULLGRAPH"] = _flag(plan["dynamo_use_fullgraph"])
        env["ACCEL_DYNAMO_USE_DYNAMIC"] = _flag(plan["dynamo_use_dynamic"])
    if plan.strategy is not None:
        env["ACCEL_STRATEGY"] = plan.strategy
        env["ACCEL_STRATEGY_CONFIG"] = json.dumps(plan.strategy_config, sort_keys=True)
        env.update(sources_variable(plan))
    for option in launch_options():
        # an engine's option with a variable reaches every launch's workers when set
        value = plan.values[option.name].value
        if option.group in engines.installed() and option.env and value is not None:
            env[option.env] = str(value)
    threads = plan["num_cpu_threads_per_process"]
    if threads is None and plan.nproc_per_node > 1:
        threads = 1
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    gpu_ids = plan["gpu_ids"]
    if gpu_ids not in (None, "", "all") and not plan["cpu"]:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu_ids)
    if plan["as_accelerate"]:
        env.update(accelerate_alias.worker_variables())
    if plan["use_parallelism_config"]:
        chosen = {name: value.value for name, value in plan.values.items()}
        parallelism.prepare_extend_env_parallelism_config(argparse.Namespace(**chosen), env)
    return env


def settle_port(plan: LaunchPlan, check_busy: bool = True) -> Value:
    """The main process port: the one given (checked free on machine 0), else a free one; 0,
    as in Accelerate, also asks for a free one (one machine only).

    With one machine a free port is picked; with several, Accelerate's default 29500 (every
    machine must agree on it). A busy port given on the main machine is an error naming it.
    """
    given = plan.values["main_process_port"]
    one_machine = int(plan["num_machines"]) == 1
    if given.value is not None and int(given.value) == 0:
        # Accelerate's spelling of "pick a free port" (trl passes it)
        if one_machine:
            return Value(free_port(), f"{given.source}: 0, a free port")
        raise AccelLaunchError(
            f"--main_process_port 0 ({given.source}) picks a free port on one machine only: with "
            f"{plan['num_machines']} machines every machine must be given the same port"
        )
    if given.value is None:
        if one_machine:
            return Value(free_port(), "default (a free port)")
        given = Value(DEFAULT_MULTI_MACHINE_PORT, "default")
    port = int(given.value)
    if not 1 <= port <= 65535:
        raise AccelLaunchError(f"--main_process_port {port} is not a port (expected 1..65535)")
    if check_busy and int(plan["machine_rank"]) == 0 and is_port_in_use(port):
        raise AccelLaunchError(
            f"--main_process_port {port} ({given.source}) is already in use on this machine; "
            "stop what holds it, pick another port, or leave the option out on a single machine "
            "to get a free one"
        )
    return Value(port, given.source)


def torch_environment(plan: LaunchPlan, port: int) -> dict[str, str]:
    """What torch's elastic agent will set, for ``--dry-run``; per-rank values as ranges."""
    if plan.world_size == 1:
        return {}
    machine = int(plan["machine_rank"])
    first = machine * plan.nproc_per_node
    return {
        "RANK": f"{first}..{first + plan.nproc_per_node - 1}",
        "LOCAL_RANK": f"0..{plan.nproc_per_node - 1}",
        "WORLD_SIZE": str(plan.world_size),
        "LOCAL_WORLD_SIZE": str(plan.nproc_per_node),
        "GROUP_RANK": str(machine),
        "MASTER_ADDR": str(plan["main_process_ip"]),
        "MASTER_PORT": str(port),
    }
