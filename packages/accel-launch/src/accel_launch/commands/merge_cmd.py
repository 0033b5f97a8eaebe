"""``accel merge-weights``: a sharded distributed checkpoint into one safetensors file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from accel_launch.commands import command_parser

DESCRIPTION = (
    "Read a torch.distributed.checkpoint folder (as FSDP's SHARDED_STATE_DICT writes it) in one "
    "process and write OUTPUT_DIR/model.safetensors. Needs safetensors: pip install "
    "'accel-launch[merge]'."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel merge-weights``."""
    parser = commands.add_parser(
        "merge-weights",
        help="Merge a sharded (FSDP) checkpoint into one safetensors file.",
        description=DESCRIPTION,
    )
    _add_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def merge_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``merge-weights`` parser (Accelerate's ``accelerate.commands.merge``): registered on
    ``subparsers`` when given, else standalone; its ``func`` default is :func:`merge_command`."""
    return command_parser(
        subparsers, add_parser, _add_arguments, merge_command, "accel merge-weights", DESCRIPTION
    )


def merge_command(args: argparse.Namespace) -> Path:
    """Merge as the parsed ``args`` say (Accelerate's ``merge_command``; prints nothing);
    returns the file written."""
    from accel_launch.merge import merge_weights

    return merge_weights(
        args.checkpoint_directory,
        args.output_path,
        safe_serialization=not args.unsafe_serialization,
        remove_checkpoint_dir=args.remove_checkpoint_dir,
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint_directory",
        metavar="CHECKPOINT_DIR",
        help="Folder of the sharded checkpoint (holds a .metadata file).",
    )
    parser.add_argument(
        "output_path", metavar="OUTPUT_DIR", help="Folder to write the merged file to."
    )
    parser.add_argument(
        "--unsafe_serialization",
        "--unsafe-serialization",
        action="store_true",
        help="Write pytorch_model.bin with torch.save instead of safetensors.",
    )
    parser.add_argument(
        "--remove_checkpoint_dir",
        "--remove-checkpoint-dir",
        action="store_true",
        help="Delete CHECKPOINT_DIR after merging.",
    )


def run(args: argparse.Namespace) -> int:
    """Merge and say where the file went."""
    print(f"accel merge-weights: wrote {merge_command(args)}")
    return 0
