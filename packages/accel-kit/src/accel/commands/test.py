"""``accel test`` as functions (Accelerate's ``accelerate.commands.test``)."""

from accel._lazy import export_table
from accel.commands.config import MAIN

_NAMES = {
    "test_command": "accel_launch.commands.test_cmd:test_command",
    "test_command_parser": "accel_launch.commands.test_cmd:test_command_parser",
}

_UNSUPPORTED = {"main": MAIN}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
