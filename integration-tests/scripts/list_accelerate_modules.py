"""Print, as JSON, every module of the installed Hugging Face Accelerate with its public names.

Run by an interpreter that has ``accelerate`` installed (``ACCEL_TEST_HF_PYTHON``); prints
``{"accelerate.commands.config.config_args": {"names": [...], "error": null}, ...}``.

The modules are what ``pkgutil.walk_packages`` finds under the package (the CLI, the test helpers
and their scripts, the deprecated ``memory_utils`` included), plus ``accelerate`` itself. A
module's public names are read from its source as ``list_accelerate_names.py`` reads them, kept
when the imported module has them. A module Accelerate itself cannot import here (its test
scripts that need transformers, datasets or DeepSpeed; ``utils.rich`` without rich) has
``names: null`` and the error in ``error``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import pkgutil
import sys
import types
import warnings
from pathlib import Path

import accelerate

# the script's folder is on sys.path when it runs: its sibling is importable
from list_accelerate_names import declared_names


def source_file(module: types.ModuleType) -> Path | None:
    return Path(module.__file__) if getattr(module, "__file__", None) else None


def module_listing() -> dict[str, dict[str, object]]:
    modules = ["accelerate"] + [
        info.name for info in pkgutil.walk_packages(accelerate.__path__, "accelerate.")
    ]
    listing: dict[str, dict[str, object]] = {}
    for name in modules:
        try:
            # some of Accelerate's test scripts print or warn when imported
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except Exception as error:  # a missing optional dependency, mostly
            listing[name] = {"names": None, "error": f"{type(error).__name__}: {error}"}
            continue
        path = source_file(module)
        declared = declared_names(path) if path is not None else set()
        names = sorted(
            n
            for n in declared
            if hasattr(module, n) and not isinstance(getattr(module, n), types.ModuleType)
        )
        listing[name] = {"names": names, "error": None}
    return listing


if __name__ == "__main__":
    json.dump(module_listing(), sys.stdout, indent=1, sort_keys=True)
