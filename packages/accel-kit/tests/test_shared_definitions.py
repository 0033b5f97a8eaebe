"""What the launcher and the processes share is defined once, in accel-base (standard library
only, so accel-launch imports it without torch); the older homes on both sides of the torch line
re-export the same objects. accel-kit depends on every package, so the check that no copy came
back lives here. How the definitions behave is tested in accel-base's own tests.
"""

from __future__ import annotations

import pytest

import accel_core.config_question
import accel_core.engine_description
import accel_core.mesh_dimension
import accel_ops.env_values
import accel_ops.launch_environment
import accel_ops.ports
from accel_base import config_question, engine_description, env_values, mesh_dimension, ports
from accel_launch.config import schema
from accel_launch.launch import options
from accel_launch.launch import ports as launch_ports

MOVED = [
    (accel_core.engine_description, engine_description),
    (accel_core.config_question, config_question),
    (accel_core.mesh_dimension, mesh_dimension),
    (accel_ops.env_values, env_values),
    (accel_ops.ports, ports),
]


@pytest.mark.parametrize(("old", "new"), MOVED, ids=[old.__name__ for old, _ in MOVED])
def test_every_old_module_path_names_accel_bases_objects(old, new):
    assert old.__all__, old.__name__
    for name in old.__all__:
        assert getattr(old, name) is getattr(new, name), f"{old.__name__}.{name}"


def test_the_launcher_offers_the_mixed_precision_modes_the_workers_accept():
    # `accel launch --mixed_precision X` writes ACCEL_MIXED_PRECISION=X, which LaunchEnvironment
    # then reads: one tuple for both
    assert schema.MIXED_PRECISIONS is env_values.MIXED_PRECISION_CHOICES
    assert (
        accel_ops.launch_environment.MIXED_PRECISION_CHOICES is env_values.MIXED_PRECISION_CHOICES
    )


def test_one_port_probe_and_one_boolean_reading():
    assert launch_ports.is_port_in_use is ports.is_port_in_use
    assert accel_ops.launch_environment.parse_bool is env_values.parse_bool
    # the launcher's option type wraps the one reading in argparse's error
    for text in (*env_values.TRUE_STRINGS, *env_values.FALSE_STRINGS):
        assert options.parse_bool(text) is env_values.parse_bool(text)


def test_the_built_in_engines_are_described_with_accel_bases_type():
    from accel_core.built_in_engines import DDP, SINGLE_DEVICE

    assert isinstance(DDP, engine_description.EngineDescription)
    assert isinstance(SINGLE_DEVICE, accel_core.engine_description.EngineDescription)
