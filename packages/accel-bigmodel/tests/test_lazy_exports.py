"""``accel_bigmodel`` imports a public name's module only when the name is first used: a process
that uses one hook (transformers imports a few names at start-up) does not load the device-map
solver, quantization or offload."""

from __future__ import annotations

import importlib
from pathlib import Path

import accel_bigmodel
from accel_testing.lazy_packages import fresh_output, type_checking_imports

INIT = Path(accel_bigmodel.__file__)


def test_import_loads_no_module_of_the_package():
    code = (
        "import sys; import accel_bigmodel; "
        "print(sorted(m for m in sys.modules if m.startswith('accel')))"
    )
    assert fresh_output(code) == str(["accel_bigmodel"])


def test_a_hook_name_loads_only_the_hooks_module():
    code = (
        "import sys; from accel_bigmodel import add_hook_to_module; "
        "print(sorted(m for m in sys.modules if m.startswith('accel')))"
    )
    assert fresh_output(code) == str(["accel_bigmodel", "accel_bigmodel.hooks"])


def test_type_checkers_see_what_runs():
    assert type_checking_imports(INIT) == accel_bigmodel._EXPORTS
    assert set(accel_bigmodel._EXPORTS) == set(accel_bigmodel.__all__)


def test_every_name_is_its_definition():
    for name, module in accel_bigmodel._EXPORTS.items():
        assert getattr(accel_bigmodel, name) is getattr(importlib.import_module(module), name)


def test_submodules_stay_reachable_as_attributes():
    assert accel_bigmodel.hooks is importlib.import_module("accel_bigmodel.hooks")
