"""The meta-package re-exports Hugging Face Accelerate's public names from the accel packages."""

import importlib
import subprocess
import sys

import pytest

from accel._lazy import UnsupportedNameError

MODULES = [
    "accel",
    "accel.state",
    "accel.utils",
    "accel.hooks",
    "accel.data_loader",
    "accel.optimizer",
    "accel.scheduler",
    "accel.logging",
    "accel.local_sgd",
    "accel.launchers",
    "accel.big_modeling",
    "accel.tracking",
    "accel.checkpointing",
]


def _names(module_name):
    module = importlib.import_module(module_name)
    return [(module_name, name, module._NAMES[name]) for name in module._NAMES]


ALL_NAMES = [entry for module_name in MODULES for entry in _names(module_name)]


@pytest.mark.parametrize(("module_name", "name", "source"), ALL_NAMES)
def test_every_listed_name_resolves_to_the_defining_package(module_name, name, source):
    value = getattr(importlib.import_module(module_name), name)
    package = source.split(":")[0]
    defining = getattr(value, "__module__", None) or package
    if isinstance(value, (str, int, float)):  # constants carry no __module__
        assert getattr(importlib.import_module(package), name) == value
    else:
        assert defining == package or defining.startswith(package.split(".")[0] + "."), (
            f"{module_name}.{name} comes from {defining}"
        )


def test_from_import_of_the_quicktour_names():
    from accel import Accelerator, PartialState, init_empty_weights, load_checkpoint_and_dispatch

    assert callable(Accelerator) and callable(PartialState)
    assert callable(init_empty_weights) and callable(load_checkpoint_and_dispatch)


def test_unsupported_name_says_so():
    with pytest.raises(UnsupportedNameError, match="DeepSpeedPlugin is not supported by accel"):
        from accel import DeepSpeedPlugin  # noqa: F401
    with pytest.raises(ImportError, match=r"Accelerator\.save_state"):
        from accel.checkpointing import save_accelerator_state  # noqa: F401


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
