"""How launch variables spell their values, and the error for one that can't be read.

The one reading of a boolean variable or option (``1/true/yes/on``, ``0/false/no/off``), of a
number of seconds, and the mixed-precision modes ``ACCEL_MIXED_PRECISION`` may hold. The launcher
(accel-launch, which writes the variables and never imports torch) and the processes (accel-ops,
which reads them; accel-core, accel-backends) all use these; ``accel_ops.env_values`` re-exports
them.
"""

from __future__ import annotations

from collections.abc import Mapping

TRUE_STRINGS = frozenset({"1", "true", "yes", "on", "y", "t"})
FALSE_STRINGS = frozenset({"0", "false", "no", "off", "n", "f", ""})

#: The values of ``ACCEL_MIXED_PRECISION`` (and of ``accel launch --mixed_precision``, the config
#: file's ``mixed_precision``): what the launcher offers is what the workers accept.
MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16")


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


def seconds(environ: Mapping[str, str], name: str, default: float, zero_ok: bool = False) -> float:
    """The number of seconds in variable ``name`` of ``environ`` (``default`` when unset or
    empty): above 0, or 0 too with ``zero_ok``; another value is a ``ValueError`` naming it."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero_ok else value > 0):
        bound = ">= 0" if zero_ok else "above 0"
        raise ValueError(
            f"{name}={text!r} is not a number of seconds {bound}; e.g. {name}={default:g}"
        )
    return value
