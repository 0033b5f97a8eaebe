"""``accel launch``: start a script on one or more processes and machines.

Also Accelerate's ``accelerate.commands.launch`` functions, :func:`launch_command_parser` and
:func:`launch_command`, over the same steps: :func:`prepare` (resolve), :func:`start` (run).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from accel_launch.commands import add_config_file_argument, command_parser
from accel_launch.launch.options import add_options

if TYPE_CHECKING:
    from accel_launch.launch.resolve import LaunchPlan

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


#: The one-line help of ``accel launch`` in ``accel --help``.
HELP = "Launch a training script."


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel launch``."""
    # no abbreviations: a script's own --project must not be read as the launcher's --project_dir
    parser = commands.add_parser("launch", help=HELP, description=DESCRIPTION, allow_abbrev=False)
    _add_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def launch_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``launch`` parser (Accelerate's ``accelerate.commands.launch``): registered on
    ``subparsers`` when given, else standalone; its ``func`` default is :func:`launch_command`.

    It takes the options of ``accel launch`` (docs/reference/cli.md), then the script and its
    arguments: ``parse_args([*launch_args, script, *script_args])``.
    """
    return command_parser(
        subparsers,
        add_parser,
        _add_arguments,
        launch_command,
        "accel launch",
        DESCRIPTION,
        allow_abbrev=False,
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
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


def load_plan(args: argparse.Namespace) -> LaunchPlan:
    """Read the config file and resolve flags, environment and config into a LaunchPlan."""
    from accel_launch.config.files import default_config_file, load_config
    from accel_launch.launch.resolve import resolve

    config_file = args.config_file
    if config_file is None and default_config_file().is_file():
        config_file = str(default_config_file())
    config = load_config(config_file) if config_file else {}
    return resolve(args, dict(os.environ), config, config_file)


def prepare(args: argparse.Namespace) -> tuple[LaunchPlan, dict[str, str]]:
    """Check the flags, resolve the plan and build the worker environment; starts nothing.

    Raises :class:`~accel_launch.errors.AccelLaunchError` for flags, variables or config values
    that are wrong or contradict each other (the chosen engine's launch check included).
    """
    from accel_launch.errors import AccelLaunchError
    from accel_launch.launch.workerenv import accel_environment

    if args.module and args.no_python:
        raise AccelLaunchError("--module and --no_python cannot be combined")
    plan = load_plan(args)
    from accel_launch.launch.engine_settings import check

    check(plan)  # the engine's launch check: settings that contradict each other stop here
    return plan, accel_environment(plan)


def print_dry_run(args: argparse.Namespace, plan: LaunchPlan, env: dict[str, str]) -> None:
    """Print what ``--dry-run`` shows: values with their sources, the environment, the command."""
    from accel_launch.launch.dryrun import format_plan
    from accel_launch.launch.workerenv import settle_port

    port = settle_port(plan, check_busy=False) if plan.world_size > 1 else None
    print(format_plan(plan, env, port, args))


def start(
    args: argparse.Namespace, plan: LaunchPlan, env: dict[str, str], *, in_place: bool
) -> int:
    """Start the job and wait for it; returns its exit code (128 + N for signal N).

    One process: with ``in_place`` it replaces this process (``exec``; returns only when the
    program cannot be started), else it runs as a child. Several processes: torch's elastic
    agent runs them from this process; ``os.environ`` is left with the worker variables.
    """
    from accel_launch.launch import agent
    from accel_launch.launch.workerenv import settle_port

    if plan.world_size == 1:
        command = agent.worker_command(
            args.training_script, args.training_script_args, args.module, args.no_python
        )
        if in_place:
            return agent.run_single(command, env)
        from accel_launch.launch.in_process import run_child

        code = run_child(command, env)
        return 128 - code if code < 0 else code
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
    return agent.run_elastic(
        plan,
        int(port.value),
        args.training_script,
        args.training_script_args,
        args.module,
        args.no_python,
        env,
        quiet=args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    """``accel launch``: resolve, then start the job (or print it with --dry-run)."""
    plan, env = prepare(args)
    if args.dry_run:
        print_dry_run(args, plan, env)
        return 0
    code = start(args, plan, env, in_place=True)
    if plan.world_size == 1:
        return code  # only when the program could not be started
    # The job is over and every worker has exited: skip the interpreter's teardown of the
    # torch modules the agent loaded (a few hundred milliseconds) and leave now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch_command(args: argparse.Namespace) -> None:
    """Run the launch ``args`` describe and wait for it (Accelerate's ``launch_command``).

    Unlike ``accel launch``, the calling program goes on afterwards: one process runs as a child
    (not in place), and ``os.environ`` and the signal handlers the elastic agent replaces are put
    back. When ``import accelerate`` loads accel in the caller, the workers get the same, with the
    caller's origin. Returns None when every process exited with 0 (or after printing, with
    ``--dry-run``). A failed job raises :class:`subprocess.CalledProcessError` with its exit code
    (128 + N for signal N) and the command of a process; with ``--quiet`` ``SystemExit`` with the
    exit code (Accelerate exits with 1 there). Bad flags or config values raise
    :class:`~accel_launch.errors.AccelLaunchError` before anything starts.
    """
    import subprocess

    from accel_launch import accelerate_alias
    from accel_launch.launch import agent
    from accel_launch.launch.in_process import caller_state_kept

    plan, env = prepare(args)
    origin = accelerate_alias.switched_on_by()
    if origin is not None and not plan["as_accelerate"]:
        env.update(accelerate_alias.worker_variables(origin))
    if getattr(args, "dry_run", False):
        print_dry_run(args, plan, env)
        return None
    with caller_state_kept():
        code = start(args, plan, env, in_place=False)
    if code == 0:
        return None
    if getattr(args, "quiet", False):
        raise SystemExit(code)
    build = agent.elastic_command if plan.world_size > 1 else agent.worker_command
    command = build(args.training_script, args.training_script_args, args.module, args.no_python)
    raise subprocess.CalledProcessError(code, command)
