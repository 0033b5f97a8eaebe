"""Accelerate's ``accelerate.commands``: the command-line commands as functions (the ``accel``
command itself is accel-launch's)."""

from accel._lazy import export_table

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
