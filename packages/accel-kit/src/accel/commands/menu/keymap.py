"""Accelerate's ``accelerate.commands.menu.keymap``: a terminal primitive of Accelerate's own menu,
refused (``accel.commands.menu`` says why)."""

from accel._lazy import export_table
from accel.commands.menu import PRIMITIVES

_UNSUPPORTED = dict.fromkeys(
    (
        "ARROW_KEY_FLAG",
        "KEYMAP",
        "get_character",
        "get_raw_chars",
    ),
    PRIMITIVES,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
