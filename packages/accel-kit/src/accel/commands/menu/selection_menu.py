"""Accelerate's ``accelerate.commands.menu.selection_menu``: ``BulletMenu`` (over questionary,
as ``accel config`` asks); ``in_colab`` belongs to Accelerate's own terminal drawing."""

from accel._lazy import export_table
from accel.commands.menu import PRIMITIVES

_NAMES = {"BulletMenu": "accel_launch.config.accelerate_api"}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, {"in_colab": PRIMITIVES})
