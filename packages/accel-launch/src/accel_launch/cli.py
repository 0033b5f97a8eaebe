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


def build_parser() -> argparse.ArgumentParser:
    """The whole ``accel`` argument parser (also used to generate docs/reference/cli.md)."""
    parser = argparse.ArgumentParser(
        prog="accel",
        description="Configure and launch PyTorch distributed training (accel-launch).",
        epilog="Run `accel <command> --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"accel-launch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    for module_name in COMMANDS.values():
        module = importlib.import_module(f"accel_launch.commands.{module_name}")
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accel`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
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
