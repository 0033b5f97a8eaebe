"""Accelerate's ``accelerate.commands.config.config_args``: where the config file is, and the
config-file objects. The folder is accel's (``$XDG_CONFIG_HOME/accel``); ``default_config_file``
is the file ``accel launch`` reads (``ACCEL_CONFIG_FILE`` when set)."""

from accel._lazy import export_table

_NAMES = {
    "default_config_file": "accel_launch.commands.config_api:default_config_file",
    "load_config_from_file": "accel_launch.commands.config_api:load_config_from_file",
    "hf_cache_home": "accel_launch.config.accelerate_api",
    "cache_dir": "accel_launch.config.accelerate_api",
    "default_yaml_config_file": "accel_launch.config.accelerate_api",
    "default_json_config_file": "accel_launch.config.accelerate_api",
    "BaseConfig": "accel_launch.config.accelerate_api",
    "ClusterConfig": "accel_launch.config.accelerate_api",
    "SageMakerConfig": "accel_launch.config.accelerate_api",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
