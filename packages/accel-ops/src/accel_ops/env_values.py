"""How launch variables spell their values, and the error for one that can't be read.

Shared by :mod:`accel_ops.launch_environment` and :mod:`accel_ops.accelerate_spellings`.
"""

from __future__ import annotations

TRUE_STRINGS = frozenset({"1", "true", "yes", "on", "y", "t"})
FALSE_STRINGS = frozenset({"0", "false", "no", "off", "n", "f", ""})


class LaunchEnvironmentError(ValueError):
    """A launch variable holds a value that can't be used."""


def parse_bool(text: str) -> bool:
    """Read a boolean the way every launch variable does (``1/true/yes/on``, ``0/false/no/off``)."""
    lowered = text.strip().lower()
    if lowered in TRUE_STRINGS:
        return True
    if lowered in FALSE_STRINGS:
        return False
    raise ValueError("a boolean: one of 1, true, yes, on or 0, false, no, off (any case)")
