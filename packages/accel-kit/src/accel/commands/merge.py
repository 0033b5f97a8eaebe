"""``accel merge-weights`` as functions (Accelerate's ``accelerate.commands.merge``)."""

from accel._lazy import export_table
from accel.commands.config import MAIN

_NAMES = {
    "merge_command": "accel_launch.commands.merge_cmd:merge_command",
    "merge_command_parser": "accel_launch.commands.merge_cmd:merge_command_parser",
    "description": "accel_launch.commands.merge_cmd:DESCRIPTION",
}

_UNSUPPORTED = {"main": MAIN}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
