"""Every public name of every Hugging Face Accelerate 1.15 module resolves under accel at the same
path (``accelerate.utils.operations.gather`` -> ``accel.utils.operations.gather``).

The names are not a committed list: ``scripts/list_accelerate_names.py`` reads them from the
Accelerate installed in its own interpreter (``ACCEL_TEST_HF_PYTHON``; ``nox -s integration`` builds
it and sets it) when the tests are collected, so upgrading Accelerate updates the test. One test per
Accelerate module, so ``pytest -rA`` names each module and its missing names; one more checks the
total. Without ``ACCEL_TEST_HF_PYTHON`` the tests skip.

A name counts as missing when the module can't be imported, when the attribute is absent, or when
reading it raises (an entry of an ``_UNSUPPORTED`` table).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

HF_PYTHON = "ACCEL_TEST_HF_PYTHON"
LISTER = Path(__file__).parent / "scripts" / "list_accelerate_names.py"
#: Accelerate 1.15 with torch 2.13 and no optional engine lists 698 names in 36 modules; far
#: fewer means the listing broke, and an empty listing must not pass.
AT_LEAST = 600


@functools.cache
def accelerate_names() -> dict[str, list[str]] | None:
    """Accelerate module -> its public names, from the ``ACCEL_TEST_HF_PYTHON`` interpreter."""
    python = os.environ.get(HF_PYTHON)
    if not python:
        return None
    done = subprocess.run(
        [python, str(LISTER)], capture_output=True, text=True, timeout=180, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{LISTER.name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "accelerate_module" not in metafunc.fixturenames:
        return
    names = accelerate_names()
    if names is None:
        reason = (
            f"{HF_PYTHON} is not set: point it at a Python with accelerate==1.15.0 "
            "(or run `nox -s integration`, which builds that venv and sets it)"
        )
        metafunc.parametrize(
            "accelerate_module", [pytest.param("", marks=pytest.mark.skip(reason))]
        )
    else:
        metafunc.parametrize("accelerate_module", sorted(names), ids=str)


def accel_path(accelerate_module: str) -> str:
    return "accel" + accelerate_module.removeprefix("accelerate")


def missing_names(accelerate_module: str, names: list[str]) -> tuple[list[str], str]:
    """The names that don't resolve under accel, and why when the whole module is missing."""
    try:
        module: ModuleType = importlib.import_module(accel_path(accelerate_module))
    except ImportError as error:
        return list(names), f"the module can't be imported: {error}"
    missing = []
    for name in names:
        try:
            getattr(module, name)
        except Exception:  # absent, or an _UNSUPPORTED entry that raises when read
            missing.append(name)
    return missing, ""


def test_module_names_resolve(accelerate_module: str) -> None:
    names = accelerate_names()[accelerate_module]
    missing, why = missing_names(accelerate_module, names)
    assert not missing, (
        f"{len(missing)} of {len(names)} names of {accelerate_module} don't resolve under "
        f"{accel_path(accelerate_module)}{f' ({why})' if why else ''}: {', '.join(missing)}"
    )


def test_every_name_resolves() -> None:
    listing = accelerate_names()
    if listing is None:
        pytest.skip(f"{HF_PYTHON} is not set")
    total = sum(len(names) for names in listing.values())
    assert total >= AT_LEAST and "Accelerator" in listing["accelerate"], (
        f"the listing of Accelerate's names looks broken: {total} names in {len(listing)} modules"
    )
    missing = {module: missing_names(module, names)[0] for module, names in listing.items()}
    count = sum(len(names) for names in missing.values())
    worst = sorted(((len(v), k) for k, v in missing.items() if v), reverse=True)
    assert count == 0, (
        f"resolving {total - count} of {total} names of Accelerate; missing per module: "
        + ", ".join(f"{accel_path(module)} {n}" for n, module in worst)
    )
