"""Which :class:`DeepSpeedPlugin` the deepspeed strategy follows: the one given, the first of a
dict of named plugins (Accelerate's ``deepspeed_plugins``: one active at a time), or one built from
the strategy's options and the launch environment (``ACCEL_STRATEGY_CONFIG``, which the plugin
reads and labels itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from accel_backends.deepspeed.plugin import DeepSpeedPlugin
from accel_backends.launch_settings import plugin_fields

_PLUGIN_FIELDS = frozenset(f.name for f in dataclasses.fields(DeepSpeedPlugin))


def named_plugins(plugin: object) -> tuple[DeepSpeedPlugin, dict[str, DeepSpeedPlugin] | None]:
    """The first plugin of ``plugin`` (a plugin, or a dict of named plugins, as Accelerate's
    ``deepspeed_plugins``) and the named plugins (None for a plain plugin).

    Raises ``ValueError`` for an empty dict, ``TypeError`` for anything but plugins.
    """
    named = dict(plugin) if isinstance(plugin, Mapping) else None
    candidates = list(named.values()) if named is not None else [plugin]
    if not candidates:
        raise ValueError("deepspeed_plugins is an empty dict: give at least one DeepSpeedPlugin.")
    for candidate in candidates:
        if not isinstance(candidate, DeepSpeedPlugin):
            raise TypeError(
                "strategy 'deepspeed' needs DeepSpeedPlugin objects, got "
                f"{type(candidate).__name__}"
            )
    if named is not None and not all(isinstance(name, str) for name in named):
        raise TypeError("the names of deepspeed_plugins must be strings")
    return candidates[0], named


def plugin_from_options(options: dict[str, Any]) -> DeepSpeedPlugin:
    """A plugin from the strategy's options: ``DeepSpeedPlugin`` fields, and the launch's
    ``ACCEL_STRATEGY_CONFIG`` keys (left to the plugin, which reads them with their source).

    Raises ``TypeError`` for an option that is neither.
    """
    fields = plugin_fields("deepspeed", "DeepSpeedPlugin", _PLUGIN_FIELDS, options)
    return DeepSpeedPlugin(**fields)  # type: ignore[arg-type]
