"""Local TCP ports: is one taken, and one that is free (the one probe: accel-ops and accel-launch
re-export it)."""

from __future__ import annotations

import socket

DEFAULT_PORT = 29500
"""torch.distributed's (and Accelerate's) default rendezvous port."""


def is_port_in_use(port: int | None = None, host: str = "127.0.0.1") -> bool:
    """True if ``port`` (default 29500) on this machine is taken.

    Taken means something accepts connections on ``host`` (Accelerate's test), or the port can't
    be bound on any local address (a listener on another interface holds it).
    """
    port = DEFAULT_PORT if port is None else int(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return True
    return False


def get_free_port(host: str = "") -> int:
    """A TCP port that the operating system reports free on ``host`` right now (another process
    may take it before you bind it: bind soon).

    ``host`` is the address bound to ask for the port: ``""`` (the default, as in Accelerate)
    means every local address, ``"127.0.0.1"`` loopback only.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
