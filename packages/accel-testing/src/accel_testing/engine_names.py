"""Finding engine names in a package's code: the check behind each layer's "names no engine"
test (issue 34: what an engine knows lives in its description, not in the layers below it).

:func:`engine_names` reads a module's identifiers and string literals (f-string parts, dotted
import paths part by part) and reports those that contain ``deepspeed``, ``fsdp`` or ``xla`` (any
case), but for the names and texts a test allows (Hugging Face Accelerate's public names that
contain an engine's name, which ported code calls). Docstrings and comments are prose for readers
and are not read. Standard library only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Set
from pathlib import Path

#: What counts as naming an engine.
ENGINE_WORD = re.compile(r"deepspeed|fsdp|xla", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are whole statements (docstrings of modules,
    classes, functions and attributes)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def _names_and_texts(node: ast.AST) -> list[str]:
    """The identifiers and the string a node carries."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name, *([node.asname] if node.asname else [])]
    if isinstance(node, ast.ImportFrom):
        return [node.module] if node.module else []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []


def engine_names(
    source: str, allowed_names: Set[str] = frozenset(), allowed_texts: Set[str] = frozenset()
) -> list[tuple[int, str]]:
    """``(line, name or text)`` for each identifier or string literal of ``source`` that names an
    engine, but for docstrings, ``allowed_names`` and ``allowed_texts``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        for text in _names_and_texts(node):
            # an import names its module dotted (torch_xla.core.xla_model): read each part
            parts = text.split(".") if isinstance(node, (ast.alias, ast.ImportFrom)) else [text]
            if any(
                ENGINE_WORD.search(part) and part not in allowed_names and part not in allowed_texts
                for part in parts
            ):
                found.append((getattr(node, "lineno", 0), text))
    return sorted(set(found))


def package_sources(package_dir: Path) -> dict[str, str]:
    """Every ``.py`` file under ``package_dir``, by its ``/``-separated path relative to it."""
    return {
        path.relative_to(package_dir).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(package_dir.rglob("*.py"))
    }


def offending_lines(
    package_dir: Path,
    allowed_names: Set[str] = frozenset(),
    allowed_texts: dict[str, frozenset[str]] | None = None,
    skipped: Set[str] = frozenset(),
) -> list[str]:
    """``"<package>/<file>:<line>: <text>"`` for every engine name in the package's code, but
    for ``allowed_names``, each file's ``allowed_texts`` and the ``skipped`` files."""
    texts = allowed_texts or {}
    return [
        f"{package_dir.name}/{name}:{line}: {text!r}"
        for name, source in package_sources(package_dir).items()
        if name not in skipped
        for line, text in engine_names(source, allowed_names, texts.get(name, frozenset()))
    ]
