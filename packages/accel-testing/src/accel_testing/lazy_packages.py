"""Checking a lazy package (one whose ``__init__`` imports its public names on first use, through
``__getattr__``, and lists them for type checkers under ``if TYPE_CHECKING:``): what a fresh
interpreter has imported after a statement, and the names the ``TYPE_CHECKING`` block imports.
Standard library only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def fresh_output(code: str) -> str:
    """The standard output of ``code`` run by a fresh interpreter (this one's executable),
    stripped; a failure raises ``CalledProcessError``."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def type_checking_imports(init: Path, strip_prefix: str = "") -> dict[str, str]:
    """name -> module, as the ``if TYPE_CHECKING:`` block of the package file ``init`` imports
    them (each module with ``strip_prefix`` removed from its start)."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.name: statement.module.removeprefix(strip_prefix)
        for statement in block.body
        if isinstance(statement, ast.ImportFrom) and statement.module is not None
        for alias in statement.names
    }
