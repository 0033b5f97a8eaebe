"""Accelerate's ``accelerate.commands.menu``: a one-question arrow-key menu, here over the
questionary menus ``accel config`` asks with (``BulletMenu(prompt, choices).run() -> index``).
The terminal primitives of Accelerate's own menu (``cursor``, ``helpers``, ``input``,
``keymap``) are refused, saying so: questionary draws accel's menus."""

from accel._lazy import export_table

_NAMES = {"BulletMenu": "accel_launch.config.accelerate_api"}

#: Why the terminal primitives of Accelerate's menu are not provided.
PRIMITIVES = (
    "accel's menus are questionary's (accel_launch.config.questionnaire), which draws them itself; "
    "use BulletMenu, or questionary directly"
)

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
