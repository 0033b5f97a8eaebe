"""Ports: is one taken, and a free one for a single-machine job."""

from __future__ import annotations

import socket


def is_port_in_use(port: int | None = None, host: str = "127.0.0.1") -> bool:
    """True if something already listens on ``port`` (Accelerate's default 29500 when None).

    Checks by connecting, like Accelerate's helper, and also by trying to bind, so that a port
    held by a listener on any local address counts as taken.
    """
    port = 29500 if port is None else int(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        if sock.connect_ex((host, port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
