"""``accel launch``: start a script on one or more processes and machines."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from accel_launch.commands import add_config_file_argument
from accel_launch.launch.options import add_options

DESCRIPTION = (
    "Launch a script on one process, or on several through torch's elastic agent "
    "(torch.distributed.run). Values come from flags, then environment variables, then the config "
    "file, then defaults; --dry-run shows each value's source and starts nothing."
)


def add_common(parser: argparse.ArgumentParser) -> None:
    """Options ``accel launch`` shares with ``accel test``: config file, quiet, dry run."""
    add_config_file_argument(
        parser,
        "Config file to read (default: ACCEL_CONFIG_FILE, else "
        "$XDG_CONFIG_HOME/accel/default_config.yaml if it exists).",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="Silence torch's elastic agent (only errors are printed).",
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        action="store_true",
        help="Print the resolved configuration with the source of each value and "
        "the worker environment, then exit without starting anything.",
    )


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel launch``."""
    parser = commands.add_parser(
        "launch", help="Launch a training script.", description=DESCRIPTION
    )
    add_common(parser)
    parser.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="The script is a module name, run as `python -m MODULE`.",
    )
    parser.add_argument(
        "--no_python",
        "--no-python",
        dest="no_python",
        action="store_true",
        help="Run the script directly, not through python (any executable).",
    )
    add_options(parser)
    parser.add_argument("training_script", help="The script (or module with -m) to run.")
    parser.add_argument(
        "training_script_args", nargs=argparse.REMAINDER, help="Arguments of the script."
    )
    parser.set_defaults(run=run)
    return parser


def load_plan(args: argparse.Namespace) -> Any:
    """Read the config file and resolve flags, environment and config into a LaunchPlan."""
    from accel_launch.config.files import default_config_file, load_config
    from accel_launch.launch.resolve import resolve

    config_file = args.config_file
    if config_file is None and default_config_file().is_file():
        config_file = str(default_config_file())
    config = load_config(config_file) if config_file else {}
    return resolve(args, dict(os.environ), config, config_file)


def run(args: argparse.Namespace) -> int:
    """Resolve, then start the job (or print it with --dry-run)."""
    from accel_launch.errors import AccelLaunchError
    from accel_launch.launch import agent
    from accel_launch.launch.workerenv import accel_environment, settle_port

    if args.module and args.no_python:
        raise AccelLaunchError("--module and --no_python cannot be combined")
    plan = load_plan(args)
    if plan.strategy == "deepspeed":
        from accel_launch.launch.deepspeed_settings import deepspeed_rows

        deepspeed_rows(plan)  # a key the DeepSpeed file and the launch disagree on stops here
    env = accel_environment(plan)
    if args.dry_run:
        from accel_launch.launch.dryrun import format_plan

        port = settle_port(plan, check_busy=False) if plan.world_size > 1 else None
        print(format_plan(plan, env, port, args))
        return 0
    if plan.world_size == 1:
        command = agent.worker_command(
            args.training_script, args.training_script_args, args.module, args.no_python
        )
        return agent.run_single(command, env)
    port = settle_port(plan)
    if not args.quiet:
        print(
            f"accel launch: {plan.nproc_per_node} processes on machine {plan['machine_rank']} of "
            f"{plan['num_machines']} (world size {plan.world_size}, "
            f"{plan.distributed_type.value}), "
            f"rendezvous {plan['main_process_ip']}:{port.value}",
            file=sys.stderr,
            flush=True,
        )
    code = agent.run_elastic(
        plan,
        int(port.value),
        args.training_script,
        args.training_script_args,
        args.module,
        args.no_python,
        env,
        quiet=args.quiet,
    )
    # The job is over and every worker has exited: skip the interpreter's teardown of the
    # torch modules the agent loaded (a few hundred milliseconds) and leave now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
