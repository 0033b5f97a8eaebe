"""Accelerate's ``accelerate.commands.accelerate_cli``: the command line's entry point, here the
``accel`` command's (``main(argv=None) -> int``)."""

from accel._lazy import export_table

_NAMES = {"main": "accel_launch.cli:main"}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
