"""Definitions that exist twice on purpose, once on each side of the torch line, kept equal.

accel-launch must start without importing torch, so it can't import accel-ops (``import
accel_ops`` costs seconds). The few tables both sides need are written once in each package;
accel-kit depends on both, so the check that they agree lives here.
"""

from __future__ import annotations

import socket

from accel_launch.config import schema
from accel_launch.launch import ports as launch_ports
from accel_ops import launch_environment
from accel_ops import ports as ops_ports


def test_the_launcher_offers_the_mixed_precision_modes_the_workers_accept():
    # two tuples because the launcher does not import torch; `accel launch --mixed_precision X`
    # writes ACCEL_MIXED_PRECISION=X, which LaunchEnvironment must then accept
    assert schema.MIXED_PRECISIONS == launch_environment.MIXED_PRECISION_CHOICES


def test_both_port_helpers_see_a_listener_and_hand_out_bindable_ports():
    # is_port_in_use is written in accel-ops (accel.utils.is_port_in_use) and in accel-launch
    # (the launcher's check), for the same reason
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        assert ops_ports.is_port_in_use(taken) and launch_ports.is_port_in_use(taken)
    for port in (ops_ports.get_free_port("127.0.0.1"), launch_ports.free_port()):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", port))
