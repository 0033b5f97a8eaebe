"""Ports: is one taken, and a free one for a single-machine job (accel-base's one probe)."""

from __future__ import annotations

from accel_base.ports import get_free_port, is_port_in_use

__all__ = ["free_port", "is_port_in_use"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` (loopback by default) that was free a moment ago."""
    return get_free_port(host)
