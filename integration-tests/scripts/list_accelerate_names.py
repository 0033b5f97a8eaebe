"""Print, as JSON, every public name of every module of the installed Hugging Face Accelerate.

Run by an interpreter that has ``accelerate`` installed (``ACCEL_TEST_HF_PYTHON``); prints
``{"accelerate.utils.operations": ["gather", ...], ...}`` on stdout.

A module's public names are read from its source, not from ``dir()``, so names it merely imports
for its own use don't count:

- the top-level functions, classes and assigned names of each module (also those under a
  top-level ``if`` or ``try``);
- in a package's ``__init__.py``, also the names it imports from its own submodules (relative
  imports): that is how ``accelerate`` and ``accelerate.utils`` publish theirs.

Names starting with ``_``, ``logger`` and module aliases (``np_core = np._core``: an import
written as an assignment) are left out. Only names the imported module really has
are kept, so what exists only when an optional engine is installed (and modules that can't be
imported without one) drop out. Test helpers, the CLI and aliases kept for old imports are not
part of the library's surface: ``test_utils``, ``commands``, ``__main__`` and ``memory_utils``
are skipped.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
import types
from pathlib import Path

import accelerate

SKIPPED_PARTS = {"test_utils", "commands", "__main__", "memory_utils"}
EXCLUDED_NAMES = {"logger"}


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> source file, for every public module under the package ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if SKIPPED_PARTS.intersection(parts) or any(part.startswith("_") for part in parts):
            continue
        found[".".join(parts)] = path
    return found


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a module body, with those nested in top-level ``if``/``try`` blocks."""
    statements = []
    for node in body:
        statements.append(node)
        if isinstance(node, ast.If):
            statements += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            nested = node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                nested += handler.body
            statements += _top_level(nested)
    return statements


def _targets(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for element in node.elts for name in _targets(element)]
    return []


def declared_names(path: Path) -> set[str]:
    """Names the source file defines at top level (and re-exports, for ``__init__.py``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(name for target in node.targets for name in _targets(target))
        elif isinstance(node, ast.AnnAssign):
            names.update(_targets(node.target))
        elif isinstance(node, ast.ImportFrom) and is_package and node.level > 0:
            names.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
    return {name for name in names if not name.startswith("_") and name not in EXCLUDED_NAMES}


def public_names() -> dict[str, list[str]]:
    """Module name -> sorted public names, for every importable Accelerate module."""
    result = {}
    for name, path in module_files(Path(accelerate.__file__).parent).items():
        try:
            module = importlib.import_module(name)
        except ImportError:  # needs an optional engine that isn't installed
            continue
        present = sorted(
            n
            for n in declared_names(path)
            if hasattr(module, n) and not isinstance(getattr(module, n), types.ModuleType)
        )
        if present:
            result[name] = present
    return result


if __name__ == "__main__":
    json.dump(public_names(), sys.stdout, indent=1, sort_keys=True)
