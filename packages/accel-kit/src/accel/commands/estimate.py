"""``accel estimate-memory`` as functions (Accelerate's ``accelerate.commands.estimate``)."""

from accel._lazy import export_table
from accel.commands.config import MAIN

_NAMES = {
    "estimate_command": "accel_launch.commands.estimate_cmd:estimate_command",
    "estimate_command_parser": "accel_launch.commands.estimate_cmd:estimate_command_parser",
    "gather_data": "accel_launch.commands.estimate_cmd:gather_data",
    "create_ascii_table": "accel_launch.commands.estimate_cmd:create_ascii_table",
    "create_empty_model": "accel_launch.estimate:create_empty_model",
    "estimate_training_usage": "accel_launch.estimate:estimate_training_usage",
}

_HUB = (
    "accel estimate-memory reads a local model folder, a timm architecture name or "
    "module:callable and never queries the Hugging Face Hub; download the model folder first"
)
_UNSUPPORTED = {
    "main": MAIN,
    "verify_on_hub": _HUB,
    "check_has_model": _HUB,
    "add_timm_hub_prefix": _HUB,
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
