"""Accelerate's launch helpers (``accelerate.utils.launch``), built over ``accel launch``'s code.

Each takes the ``argparse.Namespace`` of a launch (from ``accel launch``'s parser or Accelerate's)
and returns what ``accel launch`` would use for it: the command of the one process and the
worker environment (``ACCEL_*`` variables, docs/reference/environment.md), resolved from the
namespace, the environment and the config file the namespace names (or the default one), flags
first. With ParallelismConfig on (``use_parallelism_config``, a ``parallelism_config_*`` value or
the config file's section) the environment has the ``PARALLELISM_CONFIG_*`` variables of
:func:`prepare_extend_env_parallelism_config` too, in every helper. Like Accelerate's, the
multi-process helpers also set torchrun's fields on the namespace (``nproc_per_node``,
``nnodes``, ``node_rank``, ``master_addr``/``master_port`` or ``rdzv_endpoint``) and settle
``main_process_port`` (0 or unset: a free port on one machine).

Where accel differs from Accelerate: the environment has our variables, not ``ACCELERATE_*``
(but ``ACCELERATE_USE_PARALLELISM_CONFIG``, which ``ParallelismConfig`` reads);
mpirun and DeepSpeed's own multi-machine launchers are refused (accel starts every machine's
processes through torch's elastic agent); a busy ``main_process_port`` is an error, not a
silent switch to another port; ParallelismConfig does not need FSDP 2 (the worker decides).
"""

from __future__ import annotations

import argparse
import os

from accel_launch.config import schema
from accel_launch.errors import AccelLaunchError
from accel_launch.launch import agent
from accel_launch.launch.parallelism import (
    prepare_extend_env_parallelism_config as prepare_extend_env_parallelism_config,
)
from accel_launch.launch.resolve import LaunchPlan
from accel_launch.launch.workerenv import accel_environment, settle_port


def _plan(args: argparse.Namespace, **forced: object) -> LaunchPlan:
    from accel_launch.commands.launch_cmd import load_plan

    if getattr(args, "module", False) and getattr(args, "no_python", False):
        raise ValueError("--module and --no_python cannot be used together")
    if getattr(args, "use_megatron_lm", False):
        raise AccelLaunchError(
            "Megatron-LM is out of scope in accel; launch with --use_fsdp or --use_deepspeed"
        )
    flags = argparse.Namespace(**vars(args))
    flags.config_file = getattr(args, "config_file", None)
    if getattr(flags, "main_process_port", None) == 0:
        flags.main_process_port = None  # Accelerate's "pick a free port"
    for name, value in forced.items():
        setattr(flags, name, value)
    plan = load_plan(flags)
    _check_choices(plan)
    return plan


def _check_choices(plan: LaunchPlan) -> None:
    precision = str(plan["mixed_precision"]).lower()
    if precision == "fp8":
        raise AccelLaunchError(
            "mixed precision fp8 is out of scope in accel; use --mixed_precision bf16"
        )
    if precision not in schema.MIXED_PRECISIONS:
        raise ValueError(
            f"Unknown mixed_precision mode: {precision}. Choose between "
            f"{list(schema.MIXED_PRECISIONS)}."
        )
    backend = str(plan["dynamo_backend"]).lower()
    if backend not in schema.DYNAMO_BACKENDS:
        raise ValueError(
            f"Unknown dynamo backend: {backend.upper()}. Choose between "
            f"{[name.upper() for name in schema.DYNAMO_BACKENDS]}."
        )


def _worker_environment(plan: LaunchPlan) -> dict[str, str]:
    env = dict(os.environ)
    env.update(accel_environment(plan))
    return env


def _set_torchrun_fields(args: argparse.Namespace, plan: LaunchPlan) -> None:
    port = int(settle_port(plan).value)
    args.main_process_port = port
    args.nproc_per_node = str(plan.nproc_per_node)
    machines = int(plan["num_machines"])
    if machines > 1:
        args.nnodes = str(machines)
        args.node_rank = int(plan["machine_rank"])
        if plan["same_network"]:
            args.master_addr = str(plan["main_process_ip"])
            args.master_port = str(port)
        else:
            args.rdzv_endpoint = f"{plan['main_process_ip']}:{port}"
    else:
        args.master_port = str(port)


def prepare_simple_launcher_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a launch in this process (one process per machine).

    The command is what ``accel launch`` runs in place (``python script.py args``, ``python -m``
    with ``module``, the script itself with ``no_python``); the environment is this process's
    plus the worker variables, and ``MASTER_ADDR``/``MASTER_PORT`` when the job has several
    processes. Raises ``AccelLaunchError`` for ``mpirun_hostfile`` (accel has no mpirun launcher).
    """
    if getattr(args, "mpirun_hostfile", None) is not None:
        raise AccelLaunchError(
            "accel launch has no mpirun launcher: it starts processes through torch's elastic "
            "agent (accel launch --num_processes N ...); drop --mpirun_hostfile"
        )
    plan = _plan(args)
    command = agent.worker_command(
        args.training_script,
        list(args.training_script_args),
        bool(getattr(args, "module", False)),
        bool(getattr(args, "no_python", False)),
    )
    env = _worker_environment(plan)
    if plan.world_size > 1:
        env["MASTER_ADDR"] = str(plan["main_process_ip"])
        env["MASTER_PORT"] = str(settle_port(plan, check_busy=False).value)
    return command, env


def prepare_multi_gpu_env(args: argparse.Namespace) -> dict[str, str]:
    """The worker environment of a multi-process launch (DDP, FSDP), and torchrun's fields set on
    ``args``. Raises ``AccelLaunchError`` for a busy ``main_process_port`` on the main machine."""
    plan = _plan(args)
    _set_torchrun_fields(args, plan)
    return _worker_environment(plan)


def prepare_deepspeed_cmd_env(args: argparse.Namespace) -> tuple[None, dict[str, str]]:
    """The worker environment of a DeepSpeed launch, and torchrun's fields set on ``args``.

    The command is ``None``: processes start through torch's elastic agent, as with every
    strategy (Accelerate's ``standard`` multi-machine launcher). A ``deepspeed_multinode_launcher``
    other than ``standard`` (pdsh, openmpi, ...) on several machines is an ``AccelLaunchError``.
    """
    launcher = getattr(args, "deepspeed_multinode_launcher", None)
    plan = _plan(args, use_deepspeed=True)
    if int(plan["num_machines"]) > 1 and launcher not in (None, "standard"):
        raise AccelLaunchError(
            f"deepspeed_multinode_launcher {launcher!r} is not supported: accel starts the "
            "processes of every machine through torch's elastic agent (DeepSpeed's 'standard' "
            "launcher); run accel launch on each machine with --machine_rank"
        )
    _set_torchrun_fields(args, plan)
    return None, _worker_environment(plan)


def prepare_tpu(
    args: argparse.Namespace, current_env: dict[str, str], pod: bool = False
) -> tuple[argparse.Namespace, dict[str, str]]:
    """Add the XLA variables to ``current_env``: bf16 storage on TPU (``XLA_DOWNCAST_BF16`` with
    ``downcast_bf16``, else ``XLA_USE_BF16``), ``ACCEL_DEBUG_MODE``; for a ``pod``, copy
    ``tpu_vm`` and ``tpu_name`` to ``args.vm`` and ``args.tpu``."""
    if getattr(args, "mixed_precision", None) == "bf16" and _on_tpu():
        name = "XLA_DOWNCAST_BF16" if getattr(args, "downcast_bf16", False) else "XLA_USE_BF16"
        current_env[name] = "1"
    if getattr(args, "debug", False):
        current_env["ACCEL_DEBUG_MODE"] = "true"
    if pod:
        args.vm = getattr(args, "tpu_vm", None)
        args.tpu = getattr(args, "tpu_name", None)
    return args, current_env


def _on_tpu() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch_xla") is None:
        return False
    import torch_xla.runtime as xr

    return str(xr.device_type()) == "TPU"


def env_var_path_add(env_var_name: str, path_to_add: str | os.PathLike[str]) -> str:
    """The value of path variable ``env_var_name`` (``PYTHONPATH``...) with ``path_to_add``
    appended, ``:``-separated; empty parts dropped. ``os.environ`` is not changed."""
    parts = [part for part in os.environ.get(env_var_name, "").split(":") if part]
    parts.append(os.fspath(path_to_add))
    return ":".join(parts)
