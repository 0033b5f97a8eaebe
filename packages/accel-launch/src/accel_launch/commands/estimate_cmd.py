"""``accel estimate-memory``: memory a model needs, per dtype, without loading weights.

Also Accelerate's ``accelerate.commands.estimate`` functions over the same estimate:
:func:`estimate_command_parser`, :func:`estimate_command`, :func:`gather_data`,
:func:`create_ascii_table` (and, from :mod:`accel_launch.estimate`, ``create_empty_model`` and
``estimate_training_usage``).
"""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.commands import command_parser

_HELP = "Estimate the memory a model needs (built on the meta device)."
_DESCRIPTION = (
    "Build MODEL on the meta device (no weights, nothing downloaded) and print its largest layer, "
    "total size and Adam training size (4x) per dtype."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel estimate-memory``."""
    parser = commands.add_parser("estimate-memory", help=_HELP, description=_DESCRIPTION)
    _add_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def estimate_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``estimate-memory`` parser (Accelerate's ``accelerate.commands.estimate``): registered
    on ``subparsers`` when given, else standalone; its ``func`` default is
    :func:`estimate_command`. The model lands in ``model_name``, as in Accelerate."""
    return command_parser(
        subparsers,
        add_parser,
        _add_arguments,
        estimate_command,
        "accel estimate-memory",
        _DESCRIPTION,
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model_name",
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
    parser.add_argument(
        "--trust_remote_code",
        "--trust-remote-code",
        dest="trust_remote_code",
        action="store_true",
        help="Let transformers run the modeling code of the model folder (only for code you "
        "trust).",
    )


def run(args: argparse.Namespace) -> int:
    """Print the table."""
    estimate_command(args)
    return 0


def estimate_command(args: argparse.Namespace) -> None:
    """Print the estimate for ``args.model_name`` (Accelerate's ``estimate_command``)."""
    from accel_launch.estimate import estimate, format_table

    layer, rows = estimate(
        args.model_name,
        list(args.dtypes),
        getattr(args, "library_name", None),
        bool(getattr(args, "trust_remote_code", False)),
    )
    print(format_table(args.model_name, layer, rows))


def gather_data(args: argparse.Namespace) -> list[list[Any]]:
    """One row per dtype of ``args.dtypes`` (Accelerate's ``gather_data``): the dtype, the largest
    layer's and the whole model's size in bytes, and :func:`estimate_training_usage` of the
    model's float32 size (a dict by part)."""
    from accel_launch.estimate import DTYPE_BYTES, estimate, estimate_training_usage

    _, rows = estimate(
        args.model_name,
        list(args.dtypes),
        getattr(args, "library_name", None),
        bool(getattr(args, "trust_remote_code", False)),
    )
    data: list[list[Any]] = []
    for row in rows:
        float32_size = int(row.total * DTYPE_BYTES["float32"] / DTYPE_BYTES[row.dtype])
        usage = estimate_training_usage(float32_size, row.dtype)
        data.append([row.dtype, row.largest_layer, row.total, usage])
    return data


def create_ascii_table(headers: list[str], rows: list[list[str]], title: str) -> str:
    """A box-drawn table with ``title`` above ``headers`` and ``rows`` (strings), each cell
    centred (Accelerate's ``create_ascii_table``)."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(headers)} headers")
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    inner = sum(widths) + len(widths) - 1
    if len(title) > inner:
        widths[-1] += len(title) - inner
        inner = len(title)

    def line(left: str, middle: str, right: str) -> str:
        return left + middle.join("─" * width for width in widths) + right

    def cells(values: list[str]) -> str:
        return "│" + "│".join(str(v).center(w) for v, w in zip(values, widths, strict=True)) + "│"

    out = ["┌" + "─" * inner + "┐", "│" + title.center(inner) + "│", line("├", "┬", "┤")]
    out += [cells(headers), line("├", "┼", "┤")]
    out += [cells(row) for row in rows]
    out.append(line("└", "┴", "┘"))
    return "\n".join(out)
