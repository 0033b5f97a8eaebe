"""Every module of Hugging Face Accelerate 1.15 imports under accel at the same path
(``accelerate.commands.config.config_args`` -> ``accel.commands.config.config_args``), and each
of its public names resolves there or is refused with the reason.

The modules are not a committed list: ``scripts/list_accelerate_modules.py`` walks the
Accelerate installed in its own interpreter (``ACCEL_TEST_HF_PYTHON``; ``nox -s integration``
builds it and sets it) with ``pkgutil.walk_packages`` when the tests are collected, so a module
a later Accelerate adds shows up here as a failure to triage. One test per module; without
``ACCEL_TEST_HF_PYTHON`` the tests skip.

A module Accelerate itself cannot import in that interpreter (test scripts needing
transformers, datasets or DeepSpeed; ``utils.rich`` without rich) must import under accel too,
unless accel's import fails the same way, with an ImportError (``accel.utils.rich`` without
rich): then the test skips with both reasons. A name is refused when reading it raises accel's
``UnsupportedNameError`` (an ImportError with the reason); ``test_names_resolve_or_are_refused``
fails on a name that is simply absent. The public-name test (``test_accelerate_names.py``) holds
the library's modules to every name resolving; this one covers the CLI and test-helper modules
it leaves out.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from accel._lazy import UnsupportedNameError

HF_PYTHON = "ACCEL_TEST_HF_PYTHON"
LISTER = Path(__file__).parent / "scripts" / "list_accelerate_modules.py"
#: Accelerate 1.15 has 84 modules with its top-level package; far fewer means the listing broke.
AT_LEAST = 80


@functools.cache
def accelerate_modules() -> dict[str, dict[str, object]] | None:
    """Accelerate module -> ``{"names": [...] or None, "error": str or None}``."""
    python = os.environ.get(HF_PYTHON)
    if not python:
        return None
    done = subprocess.run(
        [python, str(LISTER)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{LISTER.name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "accelerate_module" not in metafunc.fixturenames:
        return
    listing = accelerate_modules()
    if listing is None:
        reason = (
            f"{HF_PYTHON} is not set: point it at a Python with accelerate==1.15.0 "
            "(or run `nox -s integration`, which builds that venv and sets it)"
        )
        metafunc.parametrize(
            "accelerate_module", [pytest.param("", marks=pytest.mark.skip(reason))]
        )
    else:
        metafunc.parametrize("accelerate_module", sorted(listing), ids=str)


def accel_path(accelerate_module: str) -> str:
    return "accel" + accelerate_module.removeprefix("accelerate")


def import_accel(accelerate_module: str) -> ModuleType:
    """The accel module at Accelerate's path; skips where Accelerate can't import it either."""
    entry = accelerate_modules()[accelerate_module]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", FutureWarning
            )  # accel.memory_utils warns, as Accelerate's
            return importlib.import_module(accel_path(accelerate_module))
    except ImportError as error:
        if entry["error"] is None:
            raise AssertionError(
                f"{accel_path(accelerate_module)} does not import ({error}), though "
                f"{accelerate_module} does"
            ) from error
        pytest.skip(f"neither imports here: Accelerate: {entry['error']}; accel: {error}")


def test_module_imports(accelerate_module: str) -> None:
    module = import_accel(accelerate_module)
    assert module.__name__ == accel_path(accelerate_module)


def test_names_resolve_or_are_refused(accelerate_module: str) -> None:
    names = accelerate_modules()[accelerate_module]["names"]
    module = import_accel(accelerate_module)
    absent = []
    for name in names or []:
        try:
            getattr(module, name)
        except UnsupportedNameError as refusal:
            assert str(refusal).startswith(f"{module.__name__}.{name} is not supported by accel: ")
        except AttributeError:
            absent.append(name)
    assert not absent, f"{module.__name__} lacks {len(absent)} of Accelerate's names: {absent}"


def test_every_module_path_imports() -> None:
    listing = accelerate_modules()
    if listing is None:
        pytest.skip(f"{HF_PYTHON} is not set")
    assert len(listing) >= AT_LEAST and "accelerate.commands.config.config_args" in listing, (
        f"the listing of Accelerate's modules looks broken: {len(listing)} modules"
    )
    failed = {}
    for name, entry in listing.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                importlib.import_module(accel_path(name))
        except ImportError as error:
            if entry["error"] is None:
                failed[accel_path(name)] = str(error)
    assert not failed, (
        f"{len(listing) - len(failed)} of {len(listing)} of Accelerate's module paths import under "
        f"accel; these don't: {failed}"
    )
