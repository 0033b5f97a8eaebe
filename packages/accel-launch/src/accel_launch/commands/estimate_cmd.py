"""``accel estimate-memory``: memory a model needs, per dtype, without loading weights."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel estimate-memory``."""
    parser = commands.add_parser(
        "estimate-memory",
        help="Estimate the memory a model needs (built on the meta device).",
        description="Build MODEL on the meta device (no weights, nothing downloaded) and print "
        "its largest layer, total size and Adam training size (4x) per dtype.",
    )
    parser.add_argument(
        "model",
        metavar="MODEL",
        help="A local folder with a transformers config.json, a timm architecture "
        "name, or module:callable returning a torch.nn.Module.",
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        default=["float32", "float16", "int8", "int4"],
        choices=["float32", "float16", "bfloat16", "int8", "int4"],
        help="Dtypes to show (default: float32 float16 int8 int4).",
    )
    parser.add_argument(
        "--library_name",
        "--library-name",
        dest="library_name",
        default=None,
        choices=["transformers", "timm", "callable"],
        help="How to read MODEL (default: guessed from its form).",
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the table."""
    from accel_launch.estimate import estimate, format_table

    layer, rows = estimate(args.model, args.dtypes, args.library_name)
    print(format_table(args.model, layer, rows))
    return 0
