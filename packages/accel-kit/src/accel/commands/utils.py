"""Accelerate's ``accelerate.commands.utils``: its argument parser with option groups that
``accelerate launch --help`` prints. accel's launcher groups and prints its options itself
(``accel_launch.launch.options``), so the two classes are refused, saying where to look."""

from accel._lazy import export_table

_WHY = (
    "accel's launcher builds its own option groups (accel_launch.launch.options); use "
    "argparse.ArgumentParser and add_argument_group"
)
_UNSUPPORTED = {"CustomArgumentParser": _WHY, "CustomArgumentGroup": _WHY}

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
