"""The opt-in under which ``import accelerate`` loads accel (``accel.as_accelerate``).

Each case runs in a fresh interpreter, since the switch acts at interpreter start or on the
import system of the whole process. A stand-in "Hugging Face Accelerate" (a package and a
dist-info folder reporting version 9.9.9) is put on the path where a case needs another accelerate
to be installed beside accel, as pip does for peft and trl.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import accel

KIT_VERSION = accel.__version__


@pytest.fixture
def other_accelerate(tmp_path: Path) -> Path:
    """A folder holding an installed stand-in ``accelerate`` 9.9.9 (package and metadata)."""
    package = tmp_path / "accelerate"
    package.mkdir()
    (package / "__init__.py").write_text("__version__ = '9.9.9'\nIS_OTHER = True\n")
    info = tmp_path / "accelerate-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 9.9.9\n")
    return tmp_path


def _run(code: str, env: dict[str, str] | None = None, path: Path | None = None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_AS_ACCELERATE")}
    environment.update(env or {})
    if path is not None:
        environment["PYTHONPATH"] = str(path)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


IDENTITY = """
    import importlib.metadata, pickle
    import accelerate, accel
    import accelerate.utils, accelerate.state, accelerate.utils.modeling
    from accelerate import Accelerator
    from accelerate.state import PartialState
    import accel_core, accel_ops
    assert accelerate.utils is accel.utils, "accelerate.utils is accel.utils"
    assert accelerate.utils.modeling is accel.utils.modeling
    assert Accelerator is accel.Accelerator is accel_core.Accelerator
    assert PartialState is accel_ops.PartialState
    assert isinstance(accel_ops.PartialState(), PartialState)
    assert accel.utils.__spec__.name == "accel.utils", accel.utils.__spec__.name
    assert not hasattr(accelerate, "IS_OTHER")
    print(accelerate.__version__, accel.__version__, importlib.metadata.version("accelerate"))
    try:
        import accelerate.no_such_module
    except ModuleNotFoundError as error:
        print(error)
"""


def test_the_variable_makes_import_accelerate_load_accel_modules():
    out = _ok(_run(IDENTITY, {"ACCEL_AS_ACCELERATE": "1"})).splitlines()
    assert out[0] == f"1.15.0 {KIT_VERSION} 1.15.0"
    assert out[1] == "No module named 'accelerate.no_such_module'"


def test_accel_wins_over_another_installed_accelerate(other_accelerate):
    out = _ok(_run(IDENTITY, {"ACCEL_AS_ACCELERATE": "true"}, other_accelerate)).splitlines()
    assert out[0] == f"1.15.0 {KIT_VERSION} 1.15.0"


def test_without_the_variable_nothing_changes_and_accel_is_not_imported(other_accelerate):
    code = """
        import sys, importlib.metadata
        print("accel" in sys.modules, "accel.as_accelerate" in sys.modules)
        import accelerate
        print(accelerate.IS_OTHER, importlib.metadata.version("accelerate"))
    """
    for value in (None, "0", "off"):
        env = {} if value is None else {"ACCEL_AS_ACCELERATE": value}
        result = _run(code, env, other_accelerate)
        assert _ok(result).splitlines() == ["False False", "True 9.9.9"]
        assert result.stderr == ""


def test_an_unreadable_value_leaves_the_alias_off_and_says_so(other_accelerate):
    result = _run(
        "import accelerate; print(accelerate.IS_OTHER)",
        {"ACCEL_AS_ACCELERATE": "maybe"},
        other_accelerate,
    )
    assert _ok(result).strip() == "True"
    assert "ACCEL_AS_ACCELERATE='maybe' is not one of 1, true, yes, on" in result.stderr


def test_a_debug_line_says_where_the_alias_was_switched_on():
    code = """
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s")
        import accelerate
        from accel.as_accelerate import active_origin
        print(active_origin())
    """
    env = {"ACCEL_AS_ACCELERATE": "1", "ACCEL_AS_ACCELERATE_ORIGIN": "accel launch --as-accelerate"}
    result = _run(code, env)
    assert _ok(result).strip() == "accel launch --as-accelerate"
    assert (
        "accel.as_accelerate import accelerate loads accel (Accelerate API 1.15.0), "
        "switched on by accel launch --as-accelerate" in result.stderr
    )


def test_install_in_a_script_names_its_line_and_reaches_child_processes(other_accelerate):
    code = """
        import subprocess, sys
        import accel.as_accelerate
        accel.as_accelerate.install()
        import accelerate, accel
        print(accelerate.Accelerator is accel.Accelerator)
        print(accel.as_accelerate.active_origin())
        child = "import accelerate, accel; print(accelerate.utils is accel.utils)"
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
        print(done.stdout.strip())
        accel.as_accelerate.uninstall()
        import accelerate
        print(accelerate.IS_OTHER, accel.as_accelerate.active_origin())
    """
    out = _ok(_run(code, path=other_accelerate)).splitlines()
    assert out[0] == "True"
    assert out[1] == "accel.as_accelerate.install() at <string>:4"
    assert out[2] == "True"
    assert out[3] == "True None"


def test_install_after_another_accelerate_was_imported_is_an_error(other_accelerate):
    code = """
        import accelerate
        import accel.as_accelerate
        try:
            accel.as_accelerate.install()
        except RuntimeError as error:
            print(error)
        print(accel.as_accelerate.active_origin())
    """
    out = _ok(_run(code, path=other_accelerate)).splitlines()
    assert out[0].startswith("accel.as_accelerate.install(): accelerate is already imported from ")
    assert str(other_accelerate / "accelerate" / "__init__.py") in out[0]
    assert out[1] == "None"


def test_install_after_transformers_warns():
    code = """
        import sys, types, warnings
        sys.modules["transformers"] = types.ModuleType("transformers")
        import accel.as_accelerate
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            accel.as_accelerate.install()
        print(caught[0].message)
    """
    out = _ok(_run(code)).strip()
    assert out.startswith("accel.as_accelerate.install() after transformers was imported")


def test_a_replaced_check_device_map_is_the_one_dispatch_model_calls():
    code = """
        import torch
        import accel.as_accelerate
        accel.as_accelerate.install()
        import accelerate.big_modeling
        from accelerate import dispatch_model
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
        partial_map = {"0": "cpu"}  # misses "1": the check refuses it
        calls = []
        original = accelerate.big_modeling.check_device_map
        accelerate.big_modeling.check_device_map = lambda *args, **kwargs: calls.append(args)
        try:
            dispatch_model(model, device_map=partial_map)
        finally:
            accelerate.big_modeling.check_device_map = original
        print(len(calls), calls[0][1] == partial_map)
        try:
            dispatch_model(model, device_map=dict(partial_map))
        except ValueError as error:
            print("refused", "1.weight, 1.bias" in str(error))
    """
    assert _ok(_run(code)).splitlines() == ["1 True", "refused True"]
