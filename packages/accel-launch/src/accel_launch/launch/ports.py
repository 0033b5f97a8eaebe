"""Ports: is one taken, and a free one for a single-machine job (accel-base's one probe)."""

from __future__ import annotations

from accel_base.ports import get_free_rendezvous_port, is_port_in_use

__all__ = ["free_port", "is_port_in_use"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` (loopback by default) for a job's rendezvous: free a moment ago,
    and outside the kernel's ephemeral range, so that no other connection is handed it before
    the job binds it (:func:`accel_base.ports.get_free_rendezvous_port`)."""
    return get_free_rendezvous_port(host)
