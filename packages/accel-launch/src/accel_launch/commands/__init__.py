"""One module per ``accel`` command: ``add_parser(subparsers)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from accel_launch.config.schema import MIXED_PRECISIONS


def add_config_file_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Add ``--config_file`` (also ``--config-file``) to ``parser``; unset, it parses to None."""
    parser.add_argument(
        "--config_file", "--config-file", dest="config_file", default=None, help=help_text
    )


def add_mixed_precision_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--mixed_precision`` (also ``--mixed-precision``): no (default), fp16 or bf16."""
    parser.add_argument(
        "--mixed_precision",
        "--mixed-precision",
        default="no",
        choices=MIXED_PRECISIONS,
        help="Mixed precision mode.",
    )


def command_parser(
    subparsers: Any,
    add_parser: Callable[[Any], argparse.ArgumentParser],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    func: Callable[[argparse.Namespace], Any],
    prog: str,
    description: str,
    **standalone: Any,
) -> argparse.ArgumentParser:
    """Accelerate's ``<name>_command_parser(subparsers=None)``: the command registered on
    ``subparsers`` through ``add_parser`` when given, else a standalone parser (``prog``,
    ``description``, ``standalone`` keywords) given ``add_arguments``; ``func`` is its default."""
    if subparsers is not None:
        parser = add_parser(subparsers)
    else:
        parser = argparse.ArgumentParser(prog=prog, description=description, **standalone)
        add_arguments(parser)
    parser.set_defaults(func=func)
    return parser
