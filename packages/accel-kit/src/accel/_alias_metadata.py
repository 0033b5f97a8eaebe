"""The metadata side of the ``accelerate`` alias: ``importlib.metadata`` finds an ``accelerate``
distribution whose version is the Accelerate API version accel implements.

transformers refuses to use accelerate unless ``importlib.metadata.version("accelerate")`` is new
enough, and peft and trl choose code paths by it. The distribution exists only in memory, while
the alias is on: nothing is written to disk, and pip (which reads given folders) never sees it.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accel._alias_import import ACCELERATE_API_VERSION, ALIAS

_METADATA = (
    "Metadata-Version: 2.1\n"
    f"Name: {ALIAS}\n"
    f"Version: {ACCELERATE_API_VERSION}\n"
    "Summary: accel, standing in for Hugging Face Accelerate (accel.as_accelerate)\n"
)


class AliasDistribution(importlib.metadata.Distribution):
    """``accelerate`` as ``importlib.metadata`` reports it while the alias is on."""

    def read_text(self, filename: str) -> str | None:
        if filename in ("METADATA", "PKG-INFO"):
            return _METADATA
        if filename == "top_level.txt":
            return ALIAS + "\n"
        return None

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return Path(__file__).parent / path


def find_alias_distributions(context: Any = None) -> Iterator[importlib.metadata.Distribution]:
    """The alias distribution, for a search of ``sys.path`` by the name ``accelerate`` or by no
    name; nothing for a search of given folders."""
    if context is None:
        context = importlib.metadata.DistributionFinder.Context()
    if "path" in vars(context):
        return iter(())
    name = context.name
    if name is not None and name.replace("-", "_").replace(".", "_").lower() != ALIAS:
        return iter(())
    return iter((AliasDistribution(),))
