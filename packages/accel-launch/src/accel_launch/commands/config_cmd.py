"""``accel config``: the questionnaire, and ``default``, ``update``, ``show``."""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.commands import add_config_file_argument, add_mixed_precision_argument

DESCRIPTION = (
    "Write the config file `accel launch` reads. Without a subcommand, asks questions with "
    "arrow-key menus. The file goes to --config_file, else ACCEL_CONFIG_FILE, else "
    "$XDG_CONFIG_HOME/accel/default_config.yaml (~/.config/accel/default_config.yaml)."
)
_CONFIG_FILE_HELP = "Path of the config file (default: see `accel config --help`)."


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel config`` and its subcommands."""
    parser = commands.add_parser(
        "config", help="Create or show the config file.", description=DESCRIPTION
    )
    add_config_file_argument(parser, _CONFIG_FILE_HELP)
    parser.set_defaults(run=run_questionnaire)
    sub = parser.add_subparsers(dest="config_command", metavar="<subcommand>")
    default = sub.add_parser(
        "default",
        help="Write a config for this machine without questions.",
        description="Write a config for this machine without questions: "
        "every visible GPU (one process each), or one CPU process.",
    )
    add_config_file_argument(default, _CONFIG_FILE_HELP)
    add_mixed_precision_argument(default)
    default.set_defaults(run=run_default)
    update = sub.add_parser(
        "update",
        help="Bring an older config file up to date.",
        description="Rewrite a config file with today's keys and defaults, keeping its values.",
    )
    add_config_file_argument(update, _CONFIG_FILE_HELP)
    update.set_defaults(run=run_update)
    show = sub.add_parser(
        "show",
        help="Print the config file.",
        description="Print the config file after checking it.",
    )
    add_config_file_argument(show, _CONFIG_FILE_HELP)
    show.set_defaults(run=run_show)
    return parser


def _path(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from accel_launch.config.files import default_config_file

    return Path(args.config_file) if args.config_file else default_config_file()


def run_questionnaire(args: argparse.Namespace) -> int:
    """Ask the questions and write the answers."""
    from accel_launch.config.files import save_config
    from accel_launch.config.questionnaire import ask_config

    config = ask_config()
    path = save_config(config, _path(args))
    print(f"accel configuration saved at {path}")
    return 0


def run_default(args: argparse.Namespace) -> int:
    """Write the basic config."""
    from accel_launch.config.defaults import write_basic_config

    path = write_basic_config(args.mixed_precision, _path(args))
    if path is False:
        return 1
    print(f"accel configuration saved at {path}")
    return 0


def run_update(args: argparse.Namespace) -> int:
    """Update a config file in place."""
    from accel_launch.config.files import update_config

    path = update_config(_path(args))
    print(f"accel configuration updated at {path}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print a config file after checking it."""
    import yaml

    from accel_launch.config.files import load_config

    path = _path(args)
    config = load_config(path)
    print(f"# {path}")
    print(yaml.safe_dump(config, sort_keys=False).rstrip())
    return 0
