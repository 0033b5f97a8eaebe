"""The meta-package re-exports Hugging Face Accelerate's public names from the accel packages."""

import importlib
import pkgutil
import subprocess
import sys

import pytest

import accel
from accel._lazy import UnsupportedNameError

SUBMODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(accel.__path__, "accel.")
    if not info.name.startswith("accel._")
    # the modules that are not tables: the `import accelerate` alias (test_as_accelerate.py) and
    # accel.utils.rich, which installs rich's traceback handler (test_module_paths.py)
    and info.name not in ("accel.as_accelerate", "accel.utils.rich")
)
MODULES = ["accel", *SUBMODULES]


def _names(module_name):
    module = importlib.import_module(module_name)
    return [(module_name, name, module._NAMES[name]) for name in module._NAMES]


ALL_NAMES = [entry for module_name in MODULES for entry in _names(module_name)]


def test_every_module_of_the_meta_package_is_a_table():
    assert "accel.utils.modeling" in MODULES and "accel.accelerator" in MODULES
    for module_name in MODULES:
        assert isinstance(importlib.import_module(module_name)._NAMES, dict), module_name


@pytest.mark.parametrize(("module_name", "name", "source"), ALL_NAMES)
def test_every_listed_name_is_the_object_its_package_defines(module_name, name, source):
    value = getattr(importlib.import_module(module_name), name)
    source_module, _, attribute = source.partition(":")
    assert value is getattr(importlib.import_module(source_module), attribute or name)
    package = source_module.split(".")[0]
    defining = getattr(value, "__module__", None)
    if isinstance(defining, str) and defining.startswith("accel"):
        assert defining.split(".")[0] == package, f"{module_name}.{name} comes from {defining}"


def test_from_import_of_the_quicktour_names():
    from accel import Accelerator, PartialState, init_empty_weights, load_checkpoint_and_dispatch

    assert callable(Accelerator) and callable(PartialState)
    assert callable(init_empty_weights) and callable(load_checkpoint_and_dispatch)


def test_unsupported_name_says_so():
    from accel._lazy import export_table

    getattr_of_module, _, public = export_table("accel", {}, {"Gone": "it was removed"})
    with pytest.raises(UnsupportedNameError, match=r"accel.Gone is not supported by accel: it was"):
        getattr_of_module("Gone")
    assert public == []


def test_trackers_come_from_accel_core():
    from accel.tracking import GeneralTracker, WandBTracker
    from accel_core.tracking import GeneralTracker as Ours

    assert GeneralTracker is Ours and issubclass(WandBTracker, Ours)


def test_unknown_name_is_an_attribute_error():
    import accel

    with pytest.raises(AttributeError, match="no attribute 'Acelerator'"):
        accel.Acelerator  # noqa: B018


def test_import_accel_does_not_import_torch():
    code = "import sys, accel, accel.utils, accel.hooks; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dir_lists_the_public_names():
    import accel.hooks

    assert "AlignDevicesHook" in dir(accel.hooks)
    assert "AlignDevicesHook" in accel.hooks.__all__


def test_a_submodule_is_an_attribute_of_its_package_once_the_package_is_imported():
    code = "import accel; print(accel.utils.modeling.__name__, accel.commands.merge.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["accel.utils.modeling", "accel.commands.merge"]
