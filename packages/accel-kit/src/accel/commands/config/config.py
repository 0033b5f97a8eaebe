"""Accelerate's ``accelerate.commands.config.config``: the ``config`` command (the
questionnaire) as functions."""

from accel._lazy import export_table
from accel.commands.config import MAIN

_NAMES = {
    "config_command": "accel_launch.commands.config_api:config_command",
    "config_command_parser": "accel_launch.commands.config_api:config_command_parser",
    "description": "accel_launch.commands.config_cmd:DESCRIPTION",
    "get_user_input": "accel_launch.config.accelerate_api",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, {"main": MAIN})
