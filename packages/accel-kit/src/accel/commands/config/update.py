"""Accelerate's ``accelerate.commands.config.update``: ``accel config update`` as functions."""

from accel._lazy import export_table

_NAMES = {
    "update_command_parser": "accel_launch.commands.config_api:update_command_parser",
    "update_config_command": "accel_launch.commands.config_api:update_config_command",
    "update_config": "accel_launch.config.accelerate_api",
    "description": "accel_launch.config.accelerate_api:UPDATE_DESCRIPTION",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
