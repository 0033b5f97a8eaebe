"""Accelerate's ``accelerate.commands.config.default``: ``accel config default`` as functions."""

from accel._lazy import export_table

_NAMES = {
    "default_command_parser": "accel_launch.commands.config_api:default_command_parser",
    "default_config_command": "accel_launch.commands.config_api:default_config_command",
    "description": "accel_launch.config.accelerate_api:DEFAULT_DESCRIPTION",
    "write_basic_config": "accel_launch.config.defaults:write_basic_config",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
