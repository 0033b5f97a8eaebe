"""accel-base imports nothing outside the standard library and holds one of each shared
definition: the port probe, the reading of booleans, the mixed-precision modes."""

from __future__ import annotations

import importlib.metadata
import json
import pkgutil
import socket
import subprocess
import sys

import pytest

import accel_base
from accel_base import env_values, ports
from accel_base.env_values import parse_bool


def _submodules() -> list[str]:
    return [f"accel_base.{info.name}" for info in pkgutil.iter_modules(accel_base.__path__)]


def test_importing_every_module_imports_no_torch_and_nothing_outside_the_standard_library():
    code = (
        "import importlib, json, sys\n"
        f"for name in {_submodules()!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    top_level = set(json.loads(done.stdout))
    assert "torch" not in top_level
    outside = top_level - set(sys.stdlib_module_names) - {"accel_base", "__main__"}
    # a `.pth` start-up hook of the test venv (accel-kit's) may load its own module
    assert outside <= {"_distutils_hack", "accel_kit_as_accelerate"}, sorted(outside)


def test_importing_the_package_imports_none_of_its_modules():
    code = "import sys, accel_base; print(sorted(m for m in sys.modules if m.startswith('accel_')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['accel_base']"]


def test_the_version_is_the_distributions():
    try:
        installed = importlib.metadata.version("accel-base")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("accel-base is not installed (run from its source folder)")
    assert accel_base.__version__ == installed


def test_a_port_with_a_listener_is_in_use_and_a_free_one_binds():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        assert ports.is_port_in_use(taken)
    for port in (ports.get_free_port("127.0.0.1"), ports.get_free_port()):
        assert 0 < port < 65536
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", port))
        assert not ports.is_port_in_use(port)


def test_the_default_port_is_torch_distributeds():
    assert ports.DEFAULT_PORT == 29500


@pytest.mark.parametrize("text", ["1", "true", "TRUE", " yes ", "on", "y", "T"])
def test_true_spellings(text):
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "false", "False", "no", " off", "n", "f", ""])
def test_false_spellings(text):
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["2", "maybe", "truthy", "none"])
def test_other_values_are_refused_with_the_spellings(text):
    with pytest.raises(ValueError, match="a boolean: one of 1, true, yes, on or 0, false, no, off"):
        parse_bool(text)


def test_seconds_reads_a_duration_and_names_the_variable_it_refuses():
    assert env_values.seconds({"T": " 2.5 "}, "T", 10) == 2.5
    assert env_values.seconds({}, "T", 10) == 10
    assert env_values.seconds({"T": "0"}, "T", 10, zero_ok=True) == 0
    with pytest.raises(ValueError, match=r"T='0' is not a number of seconds above 0; e.g. T=10"):
        env_values.seconds({"T": "0"}, "T", 10)


def test_the_mixed_precision_modes():
    assert env_values.MIXED_PRECISION_CHOICES == ("no", "fp16", "bf16")


def test_a_rendezvous_port_is_free_and_never_one_the_kernel_hands_out():
    low, high = ports.ephemeral_port_range()
    assert 0 < low <= high < 65536
    chosen = {ports.get_free_rendezvous_port() for _ in range(20)}
    assert all(ports.LOWEST_RENDEZVOUS_PORT <= port < low for port in chosen)
    assert len(chosen) > 1  # chosen at random: jobs started together get different ones
    for port in chosen:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", port))  # free, as promised (nothing else bound it since)


def test_a_rendezvous_port_skips_one_that_is_taken(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        taken = listener.getsockname()[1]
        listener.listen()
        # only the taken port and one above it are candidates
        monkeypatch.setattr(ports, "LOWEST_RENDEZVOUS_PORT", taken)
        monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (taken + 2, 60999))
        assert ports.get_free_rendezvous_port() == taken + 1 or not _bindable(taken + 1)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
