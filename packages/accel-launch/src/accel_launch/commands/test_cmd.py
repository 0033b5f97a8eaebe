"""``accel test``: a short distributed self-check through the real launcher."""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.commands import add_config_file_argument


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel test``."""
    parser = commands.add_parser(
        "test",
        help="Check that distributed training works with the config.",
        description="Launch a short self-check with the config (through `accel launch`): the "
        "process group, each collective, and a few training steps when accel-core is installed. "
        "Prints one line per check.",
    )
    add_config_file_argument(parser, "Config file to test (default: the default location).")
    parser.add_argument(
        "--num_processes",
        "--num-processes",
        dest="num_processes",
        type=int,
        default=None,
        help="Override the number of processes of the config.",
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Launch the self-check script with ``accel launch``'s machinery."""
    from accel_launch import selfcheck
    from accel_launch.cli import main

    argv = ["launch", "--quiet"]
    if args.config_file:
        argv += ["--config_file", args.config_file]
    if args.num_processes is not None:
        argv += ["--num_processes", str(args.num_processes)]
    print("accel test: running the self-check ...", flush=True)
    return main([*argv, selfcheck.__file__])
