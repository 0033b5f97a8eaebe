"""Copy Accelerate's ``test_utils`` package out of an installed wheel, imports rewritten to accel.

The distributed check scripts shipped in ``accelerate/test_utils/scripts/`` import their helpers
(``RegressionModel``, ``RegressionDataset``, ``are_the_same_tensors``...) from
``accelerate.test_utils``, and the library from ``accelerate``. :func:`rewrite_test_utils` copies
the whole ``test_utils`` folder into a temporary directory as the package :data:`PACKAGE` and
rewrites every import:

- ``accelerate.test_utils`` becomes :data:`PACKAGE`;
- any other ``from accelerate...`` / ``import accelerate...`` becomes ``accel...``
  (``import accelerate`` alone becomes ``import accel as accelerate``, so ``accelerate.x`` in the
  code still works);
- a relative import that climbs out of ``test_utils`` (``from ..utils import gather`` in
  ``testing.py``) becomes absolute: ``from accel.utils import gather``.

Strings are left alone (``["accelerate", "launch"]`` in ``testing.py`` is a command, not an import).
Afterwards every copied file is parsed and any import of ``accelerate`` left over is an error, so a
new import form in a later Accelerate can't slip through unrewritten.

Nothing is imported from the wheel: its files are only read. The wheel's location is asked of the
interpreter that has it installed, with ``importlib.util.find_spec``, which doesn't import it.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

PACKAGE = "accel_conformance_utils"
_FIND = (
    "import importlib.util; "
    "print(importlib.util.find_spec('accelerate').submodule_search_locations[0])"
)
_RELATIVE = re.compile(r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<rest>[\w.]*) import ", re.M)
_BARE_IMPORT = re.compile(r"^(?P<indent>[ \t]*)import accelerate[ \t]*$", re.M)
_ABSOLUTE = re.compile(r"^(?P<head>[ \t]*(?:from|import)[ \t]+)accelerate\b", re.M)
_TEST_UTILS = re.compile(r"\baccelerate\.test_utils\b")


def accelerate_folder(python: str) -> Path:
    """The ``accelerate`` package folder of the installation that ``python`` runs."""
    done = subprocess.run(
        [python, "-c", _FIND], capture_output=True, text=True, check=True, timeout=60
    )
    return Path(done.stdout.strip())


def rewrite_source(source: str, depth: int) -> str:
    """``source`` of a file ``depth`` packages deep inside ``test_utils`` (1 for its
    ``__init__.py`` and ``testing.py``, 2 for ``scripts/*.py``), with its imports rewritten."""

    def relative(match: re.Match[str]) -> str:
        climb = len(match["dots"]) - depth
        if climb <= 0:  # stays inside test_utils: still valid in the copy
            return match[0]
        if climb > 1:
            raise ValueError(f"an import climbs out of the accelerate package: {match[0]!r}")
        target = f"accel.{match['rest']}" if match["rest"] else "accel"
        return f"{match['indent']}from {target} import "

    source = _RELATIVE.sub(relative, source)
    source = _TEST_UTILS.sub(PACKAGE, source)
    source = _BARE_IMPORT.sub(r"\g<indent>import accel as accelerate", source)
    return _ABSOLUTE.sub(r"\g<head>accel", source)


def imports_of_accelerate(source: str) -> list[str]:
    """The imports of ``accelerate`` (or anything under it) left in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [m for m in modules if m == "accelerate" or m.startswith("accelerate.")]
    return found


def rewrite_test_utils(accelerate: Path, destination: Path) -> Path:
    """Copy ``accelerate/test_utils`` to ``destination/PACKAGE`` with every import rewritten;
    return the package folder. Put ``destination`` first on ``PYTHONPATH`` to use it."""
    source_root = accelerate / "test_utils"
    package = destination / PACKAGE
    shutil.copytree(source_root, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in sorted(package.rglob("*.py")):
        depth = len(path.relative_to(package).parts)
        rewritten = rewrite_source(path.read_text(encoding="utf-8"), depth)
        left = imports_of_accelerate(rewritten)
        if left:
            raise ValueError(f"{path.relative_to(destination)} still imports {left}")
        path.write_text(rewritten, encoding="utf-8")
    return package
