"""How launch variables spell their values: defined in :mod:`accel_base.env_values` (accel-base,
standard library only, which the launcher imports without torch). This module path stays,
re-exporting the same objects.
"""

from __future__ import annotations

from accel_base.env_values import (
    FALSE_STRINGS,
    MIXED_PRECISION_CHOICES,
    TRUE_STRINGS,
    LaunchEnvironmentError,
    parse_bool,
    seconds,
)

__all__ = [
    "FALSE_STRINGS",
    "MIXED_PRECISION_CHOICES",
    "TRUE_STRINGS",
    "LaunchEnvironmentError",
    "parse_bool",
    "seconds",
]
