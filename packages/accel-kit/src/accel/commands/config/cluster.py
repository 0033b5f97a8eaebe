"""Accelerate's ``accelerate.commands.config.cluster``: the questions of ``accel config``."""

from accel._lazy import export_table

_NAMES = {"get_cluster_input": "accel_launch.config.accelerate_api"}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
