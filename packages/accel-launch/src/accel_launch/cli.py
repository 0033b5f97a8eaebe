"""The ``accel`` command: config, launch, test, env, estimate-memory, merge-weights.

Building the parser imports only the standard library and this package's option tables, so
``accel --help`` and ``accel config`` never import torch; each command imports what it needs when
it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from accel_launch import __version__
from accel_launch.errors import AccelLaunchError

#: command name -> module under accel_launch.commands defining add_parser(subparsers) and run(args)
COMMANDS = {
    "config": "config_cmd",
    "launch": "launch_cmd",
    "test": "test_cmd",
    "env": "env_cmd",
    "estimate-memory": "estimate_cmd",
    "merge-weights": "merge_cmd",
}


def build_parser(*, engines: bool = True) -> argparse.ArgumentParser:
    """The whole ``accel`` argument parser (also used to generate docs/reference/cli.md).

    ``engines=False`` registers ``launch`` by its help line alone: its options include the
    installed engines', whose descriptions take an entry-point scan to read, which a command
    other than ``launch`` (or ``accel --help``) does not need.
    """
    parser = argparse.ArgumentParser(
        prog="accel",
        description="Configure and launch PyTorch distributed training (accel-launch).",
        epilog="Run `accel <command> --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"accel-launch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"accel_launch.commands.{module_name}")
        if name == "launch" and not engines:
            commands.add_parser(name, help=module.HELP)
            continue
        module.add_parser(commands)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


def _unrecognized(command: str | None, unknown: list[str]) -> str:
    """argparse's message for ``unknown`` arguments; for an engine's ``--use_*`` flag, also that
    no installed engine has it and where engines come from."""
    message = f"unrecognized arguments: {' '.join(unknown)}"
    engine_flags = [word for word in unknown if word.startswith(("--use_", "--use-", "--tpu"))]
    if command != "launch" or not engine_flags:
        return message
    from accel_launch.launch import engines

    return (
        f"{message} (no installed engine has {', '.join(engine_flags)}; installed strategies: "
        f"{', '.join(engines.strategy_names())}). {engines.ENGINE_HINT}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accel`` console script; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = _command(words)
    parser = build_parser(engines=command == "launch")
    args, unknown = parser.parse_known_args(words)
    if unknown:
        parser.error(_unrecognized(command, unknown))
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 1
    try:
        return int(args.run(args) or 0)
    except AccelLaunchError as error:
        print(f"accel {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"accel {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
