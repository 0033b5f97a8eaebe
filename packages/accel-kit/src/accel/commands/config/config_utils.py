"""Accelerate's ``accelerate.commands.config.config_utils``: the ``torch.compile`` backends a
config names, and the help formatter of the config command. Accelerate's prompt helpers
(``_ask_field`` and the like) are private there and absent here: ``accel config`` asks with
questionary's menus (``accel_launch.config.questionnaire``)."""

from accel._lazy import export_table

_NAMES = {
    "DYNAMO_BACKENDS": "accel_launch.config.accelerate_api",
    "SubcommandHelpFormatter": "accel_launch.config.accelerate_api",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
