"""Choosing the ``xla`` strategy where it can't run: clear errors, no torch_xla needed.

Runs everywhere (no torch_xla import): in a venv without torch_xla the install error is real.
"""

from __future__ import annotations

import importlib.util

import pytest

import accel_ops
from accel_backends.errors import EngineNotInstalledError
from accel_backends.xla.runtime import ReplicaWorld, check_world
from accel_backends.xla.strategy import XLAStrategy
from accel_core.strategies import registry

HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None


@pytest.fixture
def xla_registered(monkeypatch):
    """``xla`` registered by name, as the accel-backends entry point does once installed."""
    monkeypatch.setitem(registry._registered, "xla", XLAStrategy)


@pytest.mark.skipif(HAS_TORCH_XLA, reason="torch_xla is installed in this environment")
def test_without_torch_xla_the_error_names_the_install_line(xla_registered):
    from accel_core import Accelerator

    with pytest.raises(EngineNotInstalledError) as caught:
        XLAStrategy()
    assert str(caught.value) == (
        "strategy 'xla' needs torch_xla, which is not installed: pip install "
        "'accel-backends[xla]' (torch_xla needs the torch version its wheel was built for)"
    )
    with pytest.raises(EngineNotInstalledError, match=r"pip install 'accel-backends\[xla\]'"):
        Accelerator(strategy="xla")


def test_use_torch_xla_0_turns_it_off(monkeypatch):
    monkeypatch.setattr(accel_ops, "USE_TORCH_XLA", False)
    with pytest.raises(EngineNotInstalledError, match="USE_TORCH_XLA=0 turns it off"):
        XLAStrategy()


def test_unknown_options_are_refused_before_anything_else():
    with pytest.raises(TypeError, match=r"unknown options \['mesh'\]; valid options: spmd, "):
        XLAStrategy(mesh=2)


def test_several_replicas_on_the_cpu_device_are_refused():
    with pytest.raises(RuntimeError, match="XLA's CPU all-reduce deadlocks between them"):
        check_world(ReplicaWorld(replicas=2, ordinal=0, device_type="CPU", spmd=False), 1, 0)


def test_processes_and_replicas_must_be_the_same():
    # torchrun on the CPU device: two processes, each its own XLA world.
    cpu = ReplicaWorld(replicas=1, ordinal=0, device_type="CPU", spmd=False)
    with pytest.raises(RuntimeError, match="torch_xla's CPU device gives every process its own"):
        check_world(cpu, 2, 1)
    # xmp.spawn on a TPU: four replicas that accel's process state does not see.
    tpu = ReplicaWorld(replicas=4, ordinal=2, device_type="TPU", spmd=False)
    with pytest.raises(RuntimeError, match=r"1 process\(es\) .* torch_xla sees 4 replica"):
        check_world(tpu, 1, 0)
    check_world(tpu, 4, 2)  # torchrun on a TPU host: the same world
    check_world(cpu, 1, 0)


def test_the_xla_description_names_its_random_generator_for_seeding():
    # accel-core's set_seed / synchronize_rng_state("xla") use it; it imports no torch_xla here
    from accel_backends.xla.description import DESCRIPTION
    from accel_backends.xla.rng import GENERATOR
    from accel_core.engine_description import load_hook

    assert load_hook(DESCRIPTION.random_generator) is GENERATOR
    assert GENERATOR.rng_type == "xla"
    assert GENERATOR.is_available() == accel_ops.is_torch_xla_available()
    with pytest.raises(TypeError, match="an int seed"):
        GENERATOR.set_rng_state("3")


@pytest.mark.skipif(HAS_TORCH_XLA, reason="torch_xla is installed in this environment")
def test_without_torch_xla_synchronizing_its_generator_says_what_to_install():
    from accel_core import set_seed, synchronize_rng_state

    set_seed(3)  # XLA's generator is left alone without torch_xla
    with pytest.raises(ValueError) as caught:
        synchronize_rng_state("xla")
    assert str(caught.value) == "rng_type='xla' needs torch_xla: pip install torch_xla."
