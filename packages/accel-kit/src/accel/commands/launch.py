"""``accel launch`` as functions (Accelerate's ``accelerate.commands.launch``)."""

from accel._lazy import export_table

_NAMES = {
    "launch_command": "accel_launch.commands.launch_cmd:launch_command",
    "launch_command_parser": "accel_launch.commands.launch_cmd:launch_command_parser",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
