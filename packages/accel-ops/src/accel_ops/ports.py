"""Local TCP ports: is one taken, and one that is free: defined in :mod:`accel_base.ports`
(accel-base, standard library only, which the launcher imports without torch). This module path
stays, re-exporting the same objects.
"""

from __future__ import annotations

from accel_base.ports import (
    DEFAULT_PORT,
    get_free_port,
    is_port_in_use,
)

__all__ = [
    "DEFAULT_PORT",
    "get_free_port",
    "is_port_in_use",
]
