"""``accel merge-weights`` as functions (Accelerate's ``accelerate.commands.merge``)."""

from accel._lazy import export_table

_NAMES = {
    "merge_command": "accel_launch.commands.merge_cmd:merge_command",
    "merge_command_parser": "accel_launch.commands.merge_cmd:merge_command_parser",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
