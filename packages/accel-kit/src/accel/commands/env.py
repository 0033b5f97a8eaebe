"""``accel env`` as functions (Accelerate's ``accelerate.commands.env``)."""

from accel._lazy import export_table
from accel.commands.config import MAIN

_NAMES = {
    "env_command": "accel_launch.commands.env_cmd:env_command",
    "env_command_parser": "accel_launch.commands.env_cmd:env_command_parser",
}

_UNSUPPORTED = {"main": MAIN}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
