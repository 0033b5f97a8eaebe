"""Build-time helpers for the docs site (mkdocs hook and griffe extension in one small file).

- ``LazyExports`` (griffe extension, named in mkdocs.yml): packages that export names lazily
  (``_EXPORTS = {"name": "module"}``, or ``_MODULES = {"module": ("name", ...)}`` that
  ``_EXPORTS`` is built from, plus a module ``__getattr__``) get one alias per name and
  that table as their ``__all__``, so mkdocstrings documents the real objects, read statically.
  The same extension turns Sphinx roles (``:class:`~a.B```) into links and splits argument
  entries that document several parameters at once (``a, b: text``) into one entry each.
- ``on_page_markdown`` (mkdocs hook): replaces ``<!-- accel-kit-tables -->`` with, for every
  module of the ``accel`` meta-package, the table of its names and the package that defines each,
  read from the modules' ``_NAMES`` and ``_UNSUPPORTED`` tables when the site is built.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent
KIT_SOURCE = ROOT / "packages" / "accel-kit" / "src"
MARKER = "<!-- accel-kit-tables -->"
# Packages that have an API page of their own; their names link to it.
DOCUMENTED = (
    "accel_base",
    "accel_ops",
    "accel_core",
    "accel_bigmodel",
    "accel_backends",
    "accel_launch",
)
ROLE = re.compile(r":(?:class|mod|func|meth|attr|exc|data|obj):`(~?)([\w.]+)(?:\(\))?`")
COMBINED = re.compile(r"^(\s+)(\w+(?:, \w+)+): ", re.MULTILINE)


def _link(match: re.Match[str]) -> str:
    identifier = match[2]
    title = identifier.rpartition(".")[2] if match[1] else identifier
    return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'


def _split(match: re.Match[str]) -> str:
    indent, names = match[1], match[2].split(", ")
    return "".join(f"{indent}{name}: see ``{names[-1]}``.\n" for name in names[:-1]) + (
        f"{indent}{names[-1]}: "
    )


class LazyExports(griffe.Extension):
    """Turn each lazy ``_EXPORTS`` table of a package into aliases and ``__all__``."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        self.on_object(obj=pkg)  # load events reach the package's members, not the package
        lazy = [mod for mod in _modules(pkg) if _exports(mod) is not None]
        for mod in lazy:
            for name, source in _exports(mod).items():
                absolute = source.split(".")[0] in PACKAGES
                target = f"{source if absolute else f'{mod.path}.{source}'}.{name}"
                mod.set_member(name, griffe.Alias(name, target, parent=mod))
            mod.exports = sorted(_exports(mod))
        for mod in lazy:  # an entry that names no object fails the --strict build
            for name in _exports(mod):
                alias = mod.members[name]
                try:
                    alias.final_target  # noqa: B018 (resolves the alias)
                except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                    if _built_on_use(alias.target_path, pkg) or not alias.target_path.startswith(
                        f"{pkg.name}."
                    ):  # another package's name: its own page resolves it
                        continue  # made by that module's own __getattr__ (no static object)
                    griffe.logger.warning(f"{mod.path}._EXPORTS[{name!r}]: no {alias.target_path}")

    def on_object(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = COMBINED.sub(_split, ROLE.sub(_link, obj.docstring.value))


#: The import names of accel's packages: a lazy table's entry starting with one is absolute.
PACKAGES = frozenset(
    {"accel", "accel_base", "accel_ops", "accel_core", "accel_bigmodel", "accel_backends"}
    | {"accel_launch"}
)


def _built_on_use(target: str, pkg: griffe.Module) -> bool:
    """Whether ``target``'s module, in ``pkg``, builds names on first use (a ``__getattr__``)."""
    parts = target.split(".")
    if parts[0] != pkg.name:
        return False
    module: griffe.Object = pkg
    for part in parts[1:-1]:
        member = module.members.get(part)
        if member is None or member.is_alias:
            return False
        module = member
    return "__getattr__" in module.members


def _modules(mod: griffe.Module) -> list[griffe.Module]:
    inner = [m for m in mod.members.values() if not m.is_alias and m.is_module]
    return [mod, *(found for m in inner for found in _modules(m))]


def _exports(mod: griffe.Module) -> dict[str, str] | None:
    """The ``_EXPORTS`` table of a module with a ``__getattr__``, else None: a literal
    ``{name: module}``, or built from a literal ``_MODULES = {module: (name, ...)}`` (accel_ops)."""
    table = mod.members.get("_EXPORTS")
    if table is None or table.is_alias or "__getattr__" not in mod.members or table.value is None:
        return None
    modules = mod.members.get("_MODULES")
    if modules is None or modules.is_alias or modules.value is None:
        return ast.literal_eval(str(table.value))
    by_module = ast.literal_eval(str(modules.value))
    return {name: module for module, names in by_module.items() for name in names}


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    """Fill the accel-kit page with the tables of the meta-package."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, "\n".join(_kit_tables()))


def _kit_modules() -> list[str]:
    """Every public module of the ``accel`` meta-package, ``accel`` and ``accel.utils`` first."""
    names = []
    for path in sorted((KIT_SOURCE / "accel").rglob("*.py")):
        parts = path.relative_to(KIT_SOURCE).with_suffix("").parts
        if any(part.startswith("_") and part != "__init__" for part in parts):
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names, key=lambda name: (name.count("."), name != "accel", name))


def _kit_tables() -> list[str]:
    if str(KIT_SOURCE) not in sys.path:
        sys.path.insert(0, str(KIT_SOURCE))
    lines = []
    for name in _kit_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:  # accel.utils.rich needs rich, as Accelerate's does
            lines += [f"## `{name}`", "", f"Not read when this site was built: {error}.", ""]
            continue
        table: dict[str, str] = dict(vars(module).get("_NAMES", {}))
        unsupported: dict[str, str] = dict(vars(module).get("_UNSUPPORTED", {}))
        written = _written_names(Path(module.__file__))
        lines += [f"## `{name}`", ""]
        if set(table) - written:  # the module merges its submodules' tables (accel.utils)
            children = sorted(child for child in _kit_modules() if child.startswith(f"{name}."))
            listed = ", ".join(f"`{child}`" for child in children)
            lines += [f"Every name of {listed}, and the names below.", ""]
        own = sorted(key for key in table if key in written)
        if not own and not unsupported:
            lines += ["No names of its own.", ""]
            continue
        lines += ["| name | defined in | object |", "|---|---|---|"]
        lines += [_row(key, table[key]) for key in own]
        lines += [f"| `{key}` | not provided | {unsupported[key]} |" for key in sorted(unsupported)]
        lines.append("")
    return lines


def _written_names(path: Path) -> set[str]:
    """The keys of the ``_NAMES`` literal as written in the module's source."""
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == "_NAMES" and isinstance(value, ast.Dict):
            return {key.value for key in value.keys if isinstance(key, ast.Constant)}
    return set()


def _row(name: str, entry: str) -> str:
    source, _, attribute = entry.partition(":")
    identifier = f"{source}.{attribute or name}"
    package = source.partition(".")[0]
    distribution = package.replace("_", "-")
    if package in DOCUMENTED:
        where = f"[{distribution}]({package}.md)"
        target = f'<autoref identifier="{identifier}" optional><code>{identifier}</code></autoref>'
    else:
        where, target = f"`{distribution}`", f"`{identifier}`"
    return f"| `{name}` | {where} | {target} |"
