"""Lazy re-export of names defined in the accel packages.

Every public module of the meta-package is a table: public name -> the package that defines it.
Nothing is imported until a name is used, so ``import accel`` costs milliseconds and does not import
torch. A name that Hugging Face Accelerate has but accel does not support raises an ImportError that
says so, rather than a bare AttributeError.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


class UnsupportedNameError(ImportError):
    """A Hugging Face Accelerate name that accel does not provide (yet)."""


def export_table(
    module_name: str,
    table: Mapping[str, str],
    unsupported: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """Build ``__getattr__``, ``__dir__`` and ``__all__`` for a re-exporting module.

    ``table`` maps each public name to ``"package"`` (the attribute of the same name) or
    ``"package:attribute"``. ``unsupported`` maps names to the reason they are missing.
    """
    unsupported = dict(unsupported or {})

    def __getattr__(name: str) -> Any:
        if name in table:
            source, _, attribute = table[name].partition(":")
            try:
                module = importlib.import_module(source)
            except ModuleNotFoundError as error:
                distribution = source.replace("_", "-")
                raise ImportError(
                    f"{module_name}.{name} is defined in {distribution}, which is not installed: "
                    f"pip install {distribution}"
                ) from error
            value = getattr(module, attribute or name)
            globals_of_module(module_name)[name] = value
            return value
        if name in unsupported:
            raise UnsupportedNameError(
                f"{module_name}.{name} is not supported by accel: {unsupported[name]}"
            )
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(table) | set(globals_of_module(module_name)))

    return __getattr__, __dir__, sorted(table)


def globals_of_module(module_name: str) -> dict[str, Any]:
    """The namespace of an already imported module (used to cache resolved names)."""
    import sys

    return vars(sys.modules[module_name])
