"""``accel_ops`` imports a public name's submodule only when the name is first used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import accel_ops
from accel_testing.lazy_packages import fresh_output, type_checking_imports

INIT = Path(accel_ops.__file__)


def test_import_loads_no_submodule_but_the_eager_one_and_not_torch():
    code = (
        "import sys; import accel_ops; "
        "print(sorted(m for m in sys.modules if m.startswith(('accel', 'torch'))))"
    )
    assert fresh_output(code) == str(["accel_ops", "accel_ops.out_of_scope"])


def test_a_name_loads_only_what_its_submodule_needs():
    code = (
        "import sys; from accel_ops import get_free_port; "
        "print(sorted(m for m in sys.modules if m.startswith('accel')))"
    )
    # accel_ops.ports re-exports accel-base's probe
    expected = [
        "accel_base",
        "accel_base.ports",
        "accel_ops",
        "accel_ops.out_of_scope",
        "accel_ops.ports",
    ]
    assert fresh_output(code) == str(expected)


def test_type_checkers_see_what_runs():
    lazy = type_checking_imports(INIT, "accel_ops.")
    assert lazy == accel_ops._EXPORTS
    assert set(lazy) | {"OutOfScopeError", "out_of_scope"} == set(accel_ops.__all__)
    assert set(accel_ops.__all__) <= set(dir(accel_ops))


def test_every_name_is_its_definition_also_after_its_submodule_was_imported():
    # A submodule imported directly becomes an attribute of the package: where a public name is
    # also a submodule's name (``out_of_scope``), the name must still be the function.
    code = (
        "import importlib, json, accel_ops\n"
        "modules = {m: importlib.import_module(f'accel_ops.{m}') for m in accel_ops._MODULES}\n"
        "importlib.import_module('accel_ops.out_of_scope')\n"
        "wrong = [n for n, m in accel_ops._EXPORTS.items()\n"
        "         if getattr(accel_ops, n) is not getattr(modules[m], n)]\n"
        "from accel_ops import out_of_scope, OutOfScopeError\n"
        "print(json.dumps([wrong, callable(out_of_scope), OutOfScopeError.__name__]))"
    )
    assert json.loads(fresh_output(code)) == [[], True, "OutOfScopeError"]


def test_submodules_are_attributes_as_in_an_eager_package():
    code = "import accel_ops; print(accel_ops.sizes.parse_size('1KB'))"
    assert fresh_output(code) == "1000"


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="module 'accel_ops' has no attribute 'no_such_name'"):
        accel_ops.no_such_name  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'no_such_name'"):
        from accel_ops import no_such_name  # noqa: F401
