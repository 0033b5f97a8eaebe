"""Comparing library versions."""

from __future__ import annotations

import importlib.metadata
import operator
from collections.abc import Callable
from typing import Any

import torch

STR_OPERATION_TO_FUNC: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}


def _parse(version: Any) -> Any:
    from packaging.version import Version, parse

    return version if isinstance(version, Version) else parse(str(version))


def compare_versions(library_or_version: Any, operation: str, requirement_version: str) -> bool:
    """Compare an installed library's version (by distribution name) or a version to a requirement.

    ``operation`` is one of ``>``, ``>=``, ``==``, ``!=``, ``<=``, ``<``.
    """
    if operation not in STR_OPERATION_TO_FUNC:
        raise ValueError(
            f"operation={operation!r} is not supported; use one of "
            f"{', '.join(STR_OPERATION_TO_FUNC)}"
        )
    from packaging.version import Version

    if isinstance(library_or_version, str) and not isinstance(library_or_version, Version):
        try:
            library_or_version = importlib.metadata.version(library_or_version)
        except importlib.metadata.PackageNotFoundError:
            pass  # not a distribution name: treat the string as a version
    return STR_OPERATION_TO_FUNC[operation](_parse(library_or_version), _parse(requirement_version))


def is_torch_version(operation: str, version: str) -> bool:
    """Compare the running torch's version to ``version`` (local suffixes like ``+cpu`` ignored)."""
    return compare_versions(_parse(torch.__version__).base_version, operation, version)
