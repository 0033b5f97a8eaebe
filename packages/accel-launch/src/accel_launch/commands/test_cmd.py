"""``accel test``: a short distributed self-check through the real launcher.

``accel test [--config_file F] [--num_processes N]`` resolves the launch exactly as
``accel launch --quiet [--config_file F] [--num_processes N] selfcheck/__main__.py`` does, says
how many processes that is and why, and launches :mod:`accel_launch.selfcheck` (its
``__main__.py``, by path) with that number as the world size to expect: a launch that starts
another number of processes fails the check. The exit code is the self-check's: 0 when every
check passed, 1 when one failed (2 for a config error). :func:`test_command_parser` and
:func:`test_command` are Accelerate's names for the same (``accelerate.commands.test``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from typing import Any

from accel_launch.commands import add_config_file_argument, command_parser

_HELP = "Check that distributed training works with the config."
_DESCRIPTION = (
    "Launch a short self-check with the config (through `accel launch`): the process group, each "
    "collective, and a few training steps when accel-core is installed. Prints one line per check."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel test``."""
    parser = commands.add_parser("test", help=_HELP, description=_DESCRIPTION)
    _add_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def test_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``test`` parser (Accelerate's ``accelerate.commands.test``): registered on
    ``subparsers`` when given, else standalone; its ``func`` default is :func:`test_command`."""
    return command_parser(
        subparsers, add_parser, _add_arguments, test_command, "accel test", _DESCRIPTION
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_file_argument(parser, "Config file to test (default: the default location).")
    parser.add_argument(
        "--num_processes",
        "--num-processes",
        dest="num_processes",
        type=int,
        default=None,
        help="Override the number of processes of the config.",
    )


def selfcheck_script() -> str:
    """The path of the self-check's ``__main__.py`` (found without importing it, so without torch).

    Run by path, as ``python FILE`` (one process) or by ``accel_launch.launch.worker FILE``
    (several), it imports its sibling modules absolutely, from the installed package.
    """
    spec = importlib.util.find_spec("accel_launch.selfcheck")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        script = os.path.join(folder, "__main__.py")
        if os.path.isfile(script):
            return script
    raise FileNotFoundError("accel_launch/selfcheck/__main__.py is missing: reinstall accel-launch")


def selfcheck_launch(args: argparse.Namespace) -> argparse.Namespace:
    """The ``accel launch`` arguments of the self-check, resolved as ``accel launch`` would;
    says on stdout how many processes it starts and why."""
    from accel_launch.cli import build_parser
    from accel_launch.commands.launch_cmd import load_plan

    argv = ["launch", "--quiet"]
    if getattr(args, "config_file", None):
        argv += ["--config_file", args.config_file]
    if getattr(args, "num_processes", None) is not None:
        argv += ["--num_processes", str(args.num_processes)]
    launch_args = build_parser().parse_args([*argv, selfcheck_script()])
    plan = load_plan(launch_args)
    world = plan.world_size
    asked_by = f"num_processes {plan['num_processes']} from {plan.values['num_processes'].source}"
    launch_args.training_script_args = ["--world-size", str(world), "--asked-by", asked_by]
    noun = "process" if world == 1 else "processes"
    print(f"accel test: running the self-check on {world} {noun} ({asked_by}) ...", flush=True)
    return launch_args


def run(args: argparse.Namespace) -> int:
    """``accel test``: resolve the launch as ``accel launch`` would, then start the self-check."""
    launch_args = selfcheck_launch(args)
    return int(launch_args.run(launch_args))


def test_command(args: argparse.Namespace) -> None:
    """Run the self-check as ``args`` say and return (Accelerate's ``test_command``); the
    self-check prints one line per check and a last line saying that all passed.

    The caller goes on afterwards (the launch runs through
    :func:`~accel_launch.commands.launch_cmd.launch_command`). A failed check raises
    ``RuntimeError`` naming the exit code, as Accelerate's does.
    """
    from accel_launch.commands.launch_cmd import launch_command

    launch_args = selfcheck_launch(args)
    try:
        launch_command(launch_args)
    except SystemExit as failed:  # --quiet: the job's exit code
        raise RuntimeError(
            f"accel test failed with exit code {failed.code} (config file: "
            f"{getattr(args, 'config_file', None) or 'the default'})"
        ) from None
