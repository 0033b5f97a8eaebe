"""Which :class:`DeepSpeedPlugin` the deepspeed strategy follows: the one given (a dict of named
plugins holding one is accepted), or one built from the strategy's options and the launch
environment (``ACCEL_STRATEGY_CONFIG``, which the plugin reads and labels itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from accel_backends.deepspeed_plugin import DeepSpeedPlugin
from accel_backends.errors import StrategyNotBuiltError

_PLUGIN_FIELDS = frozenset(f.name for f in dataclasses.fields(DeepSpeedPlugin))


def single_plugin(plugin: object) -> DeepSpeedPlugin:
    """``plugin``, or the one plugin of a dict of named plugins.

    Raises ``StrategyNotBuiltError`` for several plugins, ``TypeError`` for anything else.
    """
    if isinstance(plugin, Mapping):
        plugins = list(plugin.values())
        if len(plugins) != 1:
            raise StrategyNotBuiltError(
                f"several DeepSpeed plugins at once ({len(plugins)} given) are not built yet in "
                "accel-backends; pass one DeepSpeedPlugin."
            )
        plugin = plugins[0]
    if not isinstance(plugin, DeepSpeedPlugin):
        raise TypeError(
            f"strategy 'deepspeed' needs a DeepSpeedPlugin, got {type(plugin).__name__}"
        )
    return plugin


def plugin_from_options(options: dict[str, Any]) -> DeepSpeedPlugin:
    """A plugin from the strategy's options: ``DeepSpeedPlugin`` fields, and the launch's
    ``ACCEL_STRATEGY_CONFIG`` keys (left to the plugin, which reads them with their source).

    Raises ``TypeError`` for an option that is neither.
    """
    from accel_backends.launch_settings import LaunchSettings

    settings = LaunchSettings("deepspeed")
    # Options that are the launch's ACCEL_STRATEGY_CONFIG: the plugin reads (and labels) them.
    given = {k: v for k, v in options.items() if settings.config.get(k) != v}
    fields = {k: v for k, v in given.items() if k in _PLUGIN_FIELDS}
    unread = sorted(k for k in given if k not in _PLUGIN_FIELDS)
    if unread:
        raise TypeError(
            f"strategy 'deepspeed' got options {unread} that are neither DeepSpeedPlugin fields "
            "nor the launch's ACCEL_STRATEGY_CONFIG; valid options: "
            f"{', '.join(sorted(_PLUGIN_FIELDS))}."
        )
    return DeepSpeedPlugin(**fields)
