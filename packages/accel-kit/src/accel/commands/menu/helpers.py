"""Accelerate's ``accelerate.commands.menu.helpers``: a terminal primitive of Accelerate's own menu,
refused (``accel.commands.menu`` says why)."""

from accel._lazy import export_table
from accel.commands.menu import PRIMITIVES

_UNSUPPORTED = dict.fromkeys(
    (
        "CURSOR_TO_CHAR",
        "Direction",
        "TERMINAL_WIDTH",
        "clear_line",
        "forceWrite",
        "linebreak",
        "move_cursor",
        "reset_cursor",
        "writeColor",
    ),
    PRIMITIVES,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
