"""The modules of ``accel_core.data_loader`` import each other without a cycle.

Read from the source with ``ast``, so imports inside functions (deferred, run later) count as
much as the ones at the top of a module: a deferred import that goes back up is a cycle that
only shows when the function runs. ``from accel_core.data_loader import name`` counts as an
import of the package itself (whose ``__init__`` imports every module) unless ``name`` is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import accel_core.data_loader

PACKAGE = "accel_core.data_loader"
FOLDER = Path(accel_core.data_loader.__file__).parent


def _module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def _imported_modules(tree: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules that ``tree`` imports anywhere (top level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: every module here is directly in the package
                base = f"{PACKAGE}.{base}" if base else PACKAGE
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            # importlib.import_module("accel_core.data_loader.x") and __import__("...")
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name in {"import_module", "__import__"}:
                    found.add(first.value)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports."""
    paths = sorted(FOLDER.glob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {}
    for path in paths:
        name = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = _imported_modules(tree, modules) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph.get(node, ())):
            cycle = visit(target, [*path, node])
            if cycle is not None:
                return cycle
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start, [])
        if cycle is not None:
            return cycle
    return None


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert f"{PACKAGE}.loader_state" in graph[f"{PACKAGE}.shard_loader"]
    assert f"{PACKAGE}.stateful" in graph[f"{PACKAGE}.factory"]  # a deferred import


def test_no_import_cycle_in_the_data_loader_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_check_finds_a_deferred_cycle():
    a = ast.parse("def f():\n    from accel_core.data_loader.b import x\n")
    b = ast.parse("from accel_core.data_loader import a\n")
    modules = {f"{PACKAGE}.a", f"{PACKAGE}.b"}
    graph = {
        f"{PACKAGE}.a": _imported_modules(a, modules),
        f"{PACKAGE}.b": _imported_modules(b, modules),
    }
    assert find_cycle(graph) == [f"{PACKAGE}.a", f"{PACKAGE}.b", f"{PACKAGE}.a"]


def test_the_loaders_do_not_import_the_stateful_module():
    graph = import_graph()
    for loader in ("loader_state", "shard_loader", "dispatcher", "skip"):
        assert f"{PACKAGE}.stateful" not in graph[f"{PACKAGE}.{loader}"], loader
