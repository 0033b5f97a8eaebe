"""``accel config`` as functions (Accelerate's ``accelerate.commands.config``); its submodules
are Accelerate's ``config_args``, ``config_utils``, ``cluster``, ``config``, ``default``,
``update`` and ``sagemaker``, over accel-launch's config code."""

from accel._lazy import export_table

_NAMES = {
    "default_config_file": "accel_launch.commands.config_api:default_config_file",
    "load_config_from_file": "accel_launch.commands.config_api:load_config_from_file",
    "config_command_parser": "accel_launch.commands.config_api:config_command_parser",
    "get_config_parser": "accel_launch.commands.config_api:get_config_parser",
    "default_command_parser": "accel_launch.commands.config_api:default_command_parser",
    "update_command_parser": "accel_launch.commands.config_api:update_command_parser",
}

#: Accelerate's ``main`` of a command module parses ``sys.argv`` for that one command; accel has
#: one entry point for every command.
MAIN = "the commands run through one entry point: run `accel <command>` (accel_launch.cli.main)"
_UNSUPPORTED = {"main": MAIN}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
