"""What an engine says about itself: defined in :mod:`accel_base.engine_description` (accel-base,
standard library only, which the launcher imports without torch). This module path stays,
re-exporting the same objects.
"""

from __future__ import annotations

from accel_base.engine_description import (
    ENTRY_POINT_GROUP,
    ConfigKey,
    EngineDescription,
    LaunchOption,
    OptionValue,
    describe_entry_point,
    engine_for,
    installed_engines,
    load_hook,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "ConfigKey",
    "EngineDescription",
    "LaunchOption",
    "OptionValue",
    "describe_entry_point",
    "engine_for",
    "installed_engines",
    "load_hook",
]
