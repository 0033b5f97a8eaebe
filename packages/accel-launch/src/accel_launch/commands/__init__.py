"""One module per ``accel`` command: ``add_parser(subparsers)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse


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
        choices=("no", "fp16", "bf16"),
        help="Mixed precision mode.",
    )
