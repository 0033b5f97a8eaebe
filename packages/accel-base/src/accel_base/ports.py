"""Local TCP ports: is one taken, and one that is free (the one probe: accel-ops and accel-launch
re-export it)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

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


#: The kernel's ephemeral range where it can't be read (Linux's default).
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
#: The lowest port :func:`get_free_rendezvous_port` chooses (above the registered services that
#: commonly listen below it).
LOWEST_RENDEZVOUS_PORT = 20000


def ephemeral_port_range() -> tuple[int, int]:
    """The ports the kernel gives outgoing connections and ``bind(0)``
    (``/proc/sys/net/ipv4/ip_local_port_range`` on Linux; its default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE


def get_free_rendezvous_port(host: str = "127.0.0.1") -> int:
    """A port for a job's rendezvous that nothing else is handed meanwhile: free on ``host``
    now, and outside the kernel's ephemeral range.

    :func:`get_free_port` returns an ephemeral port, which the kernel may give to any outgoing
    connection (another job's gloo sockets, an HTTP client) between the probe and the moment the
    job's rank 0 binds it: the job then fails with ``EADDRINUSE``. A port below the ephemeral
    range is only ever taken by a process that binds it by number. Tried at random (so that jobs
    started together choose different ones), each checked by binding it.
    """
    low, _ = ephemeral_port_range()
    candidates = list(range(LOWEST_RENDEZVOUS_PORT, low))
    random.SystemRandom().shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    return get_free_port(host)  # an ephemeral range that starts at 20000 or below, or all taken
