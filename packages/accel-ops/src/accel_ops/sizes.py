"""Human-written byte sizes ("10GiB", "500MB", "5Gb") read as a number of bytes.

The rules are those of Hugging Face Accelerate's ``convert_file_size_to_int`` (which reads
``max_memory``), widened where that is unambiguous:

- an int is a number of bytes and passes through (a float is truncated to an int);
- a string is a number (``"1.5"``, ``".5"``, ``"5."``) and a unit, case-insensitive, spaces
  allowed around them: ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000, ``KiB``, ``MiB``, ``GiB``,
  ``TiB`` powers of 1024, ``B`` or nothing are bytes (Accelerate has neither TB/TiB nor a bare
  number, and fails with an ``AttributeError`` on a float);
- a lowercase ``b`` ending a decimal unit means bits: ``"5Gb"`` (and ``"5gb"``, ``"5Mb"``,
  ``"100b"``) is divided by 8, as in Accelerate. ``bits=False`` reads it as bytes instead, as
  ``huggingface_hub`` reads ``max_shard_size`` (``"5gb"`` is five gigabytes in
  ``Accelerator.save_model`` and ``save_pretrained``);
- negative sizes are refused.
"""

from __future__ import annotations

import math
import re

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)

ACCEPTED = (
    "an int (bytes) or a string of a number and a unit: KB, MB, GB, TB (powers of 1000) or "
    "KiB, MiB, GiB, TiB (powers of 1024), case-insensitive, e.g. '10GiB', '500MB', '1.5GB'"
)
"""What :func:`parse_size` accepts, for error messages."""

_BITS = "; a lowercase b after a decimal unit means bits ('5Gb' is 5 * 10**9 / 8 bytes)"


def parse_size(size: int | float | str, *, name: str = "size", bits: bool = True) -> int:
    """``size`` in bytes, by the rules in this module's docstring.

    ``name`` is how error messages call the value (``max_shard_size``, ``max_memory[0]``...).
    ``bits`` says whether a lowercase ``b`` after a decimal unit means bits (``"5Gb"`` is
    625,000,000 bytes) or bytes. Raises ``ValueError`` naming the value and what is accepted.
    """
    accepted = ACCEPTED + (_BITS if bits else "")
    if isinstance(size, bool) or not isinstance(size, int | float | str):
        raise ValueError(f"{name}={size!r} is not a size: expected {accepted}.")
    if isinstance(size, str):
        match = _SIZE.fullmatch(size)
        unit = match.group(2) if match else ""
        if match is None or unit.upper() not in _UNITS:
            raise ValueError(f"{name}={size!r} is not a size: expected {accepted}.")
        value = int(float(match.group(1)) * _UNITS[unit.upper()])
        if bits and unit.endswith("b") and not unit.upper().endswith("IB"):
            value //= 8
        return value
    if size < 0 or not math.isfinite(size):
        raise ValueError(f"{name}={size!r} is not a size of 0 or more bytes: expected {accepted}.")
    return int(size)
