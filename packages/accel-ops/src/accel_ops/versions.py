"""Comparing library versions.

``packaging`` is imported on first use, so ``import accel_ops`` does not load it.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

import torch

from accel_ops.constants import STR_OPERATION_TO_FUNC

if TYPE_CHECKING:
    from packaging.version import Version


torch_version: Version
"""The installed torch's version as a ``packaging`` ``Version``, local suffix included
(``Version('2.13.0+cpu')``). Computed on first access (see ``__getattr__`` below)."""


def _installed_torch_version() -> Version:
    from packaging.version import Version

    try:
        return Version(importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:  # torch run from a source tree
        return Version(torch.__version__)


def __getattr__(name: str) -> Version:
    # Only ``torch_version`` is computed lazily; it is stored on first access.
    if name == "torch_version":
        value = _installed_torch_version()
        globals()["torch_version"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parse(version: str | Version) -> Version:
    from packaging.version import Version

    return version if isinstance(version, Version) else Version(str(version))


def compare_versions(
    library_or_version: str | Version, operation: str, requirement_version: str
) -> bool:
    """Compare an installed library's version (by distribution name) or a version to a requirement.

    ``operation`` is one of ``>``, ``>=``, ``==``, ``!=``, ``<=``, ``<``.
    """
    if operation not in STR_OPERATION_TO_FUNC:
        raise ValueError(
            f"operation={operation!r} is not supported; use one of "
            f"{', '.join(STR_OPERATION_TO_FUNC)}"
        )
    if isinstance(library_or_version, str):
        try:
            library_or_version = importlib.metadata.version(library_or_version)
        except importlib.metadata.PackageNotFoundError:
            pass  # not a distribution name: treat the string as a version
    return STR_OPERATION_TO_FUNC[operation](_parse(library_or_version), _parse(requirement_version))


def is_torch_version(operation: str, version: str) -> bool:
    """Compare the running torch's version to ``version`` (local suffixes like ``+cpu`` ignored)."""
    return compare_versions(_parse(torch.__version__).base_version, operation, version)
