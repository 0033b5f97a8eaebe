"""Lazy re-export of names defined in the accel packages.

Every public module of the meta-package is a table: public name -> the package that defines it.
Nothing is imported until a name is used, so ``import accel`` costs milliseconds and does not import
torch. A name that Hugging Face Accelerate has but accel does not support raises an ImportError that
says so, rather than a bare AttributeError.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


class UnsupportedNameError(ImportError):
    """A Hugging Face Accelerate name that accel does not provide (yet)."""


def export_table(
    module_name: str,
    table: Mapping[str, str],
    unsupported: Mapping[str, str] | None = None,
    install: str | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """Build ``__getattr__``, ``__dir__`` and ``__all__`` for a re-exporting module.

    ``table`` maps each public name to ``"package"`` (the attribute of the same name) or
    ``"package:attribute"``. ``unsupported`` maps names to the reason they are missing.
    ``install`` says how to get a defining package that is not installed (default: ``pip install``
    its distribution).
    """
    unsupported = dict(unsupported or {})

    def __getattr__(name: str) -> Any:
        if name in table:
            source, _, attribute = table[name].partition(":")
            try:
                module = importlib.import_module(source)
            except ModuleNotFoundError as error:
                package = source.partition(".")[0]
                if error.name is not None and error.name.partition(".")[0] != package:
                    raise  # the defining package is there; something it imports is not
                distribution = package.replace("_", "-")
                raise ImportError(
                    f"{module_name}.{name} is defined in {distribution}, which is not installed: "
                    f"{install or f'pip install {distribution}'}"
                ) from error
            value = getattr(module, attribute or name)
            globals_of_module(module_name)[name] = value
            return value
        if name in unsupported:
            raise UnsupportedNameError(
                f"{module_name}.{name} is not supported by accel: {unsupported[name]}"
            )
        submodule = _submodule(module_name, name)
        if submodule is not None:
            return submodule
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(table) | set(globals_of_module(module_name)))

    return __getattr__, __dir__, sorted(table)


def _submodule(module_name: str, name: str) -> ModuleType | None:
    """The submodule ``name`` of a package, imported on first use (``import accel`` then
    ``accel.utils.X`` works, as ``import accelerate`` then ``accelerate.utils.X`` does)."""
    if name.startswith("__") or not hasattr(sys.modules[module_name], "__path__"):
        return None
    if _find_spec(f"{module_name}.{name}") is None:
        return None
    return importlib.import_module(f"{module_name}.{name}")


def globals_of_module(module_name: str) -> dict[str, Any]:
    """The namespace of an already imported module (used to cache resolved names)."""
    return vars(sys.modules[module_name])


class _ReplaceableNamesModule(ModuleType):
    """A table module whose listed names, when replaced, are replaced where they are used."""

    _replaceable: Mapping[str, str] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        target = self._replaceable.get(name)
        if target is not None:
            source, _, attribute = target.partition(":")
            setattr(importlib.import_module(source), attribute or name, value)
        super().__setattr__(name, value)


def replaceable_names(module_name: str, targets: Mapping[str, str]) -> None:
    """Let code replace the functions named in ``targets`` at this module's path, as it does at
    Accelerate's (transformers sets ``accelerate.big_modeling.check_device_map``).

    ``targets`` maps each name to ``"package.module:attribute"``, the global that the defining
    package looks up when it calls the function: a replacement here is made there too, so it takes
    effect, and putting the original back puts it back there.
    """
    module = sys.modules[module_name]
    replaceable = type(
        "ReplaceableNamesModule", (_ReplaceableNamesModule,), {"_replaceable": dict(targets)}
    )
    module.__class__ = replaceable


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    # importlib.util is imported when first needed: the start-up hook imports this module, and
    # importlib.util brings contextlib and re with it
    import importlib.util

    return importlib.util.find_spec(name)
