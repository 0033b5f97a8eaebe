import importlib.metadata

import accel_backends


def test_installs_with_its_declared_version():
    assert accel_backends.__version__ == importlib.metadata.version("accel-backends") == "0.2.0"


def test_registers_no_strategy_yet():
    assert accel_backends.PROVIDED_STRATEGIES == ()
    group = importlib.metadata.entry_points(group="accel.strategies")
    assert not [ep for ep in group if ep.value.startswith("accel_backends")]
