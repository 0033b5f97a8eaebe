"""Byte-compile accel's own modules before a benchmark run, as installing a wheel does.

``pip install`` writes the ``.pyc`` of every module it installs, so Hugging Face Accelerate and
Lightning Fabric in their venvs start from compiled bytecode. accel installed editable from a
checkout, under ``PYTHONDONTWRITEBYTECODE`` (set in some CI and development environments), has
none and would compile its ~90 imported modules from source in every process: about 45 ms of a
worker's start-up, which is the environment's cost, not the library's. :func:`compile_accel`
writes the ``.pyc`` files the way pip does (``compileall``; importing reads them even when
writing is disabled), so every library is measured as installed.
"""

from __future__ import annotations

import compileall
import importlib.util
import subprocess
import sys
from pathlib import Path

#: The import names of accel's distributions (the benchmarks import these and nothing else of ours).
ACCEL_PACKAGES = (
    "accel",
    "accel_base",
    "accel_ops",
    "accel_core",
    "accel_bigmodel",
    "accel_backends",
    "accel_launch",
)


def package_folder(name: str) -> Path | None:
    """Where the installed package ``name`` lives, or None when it is not installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def compile_accel(python: str = sys.executable) -> list[Path]:
    """Write the bytecode of each installed accel package for ``python`` (this interpreter by
    default); returns the folders compiled."""
    folders = [folder for name in ACCEL_PACKAGES if (folder := package_folder(name))]
    if python == sys.executable:
        for folder in folders:
            compileall.compile_dir(folder, quiet=1)
    else:
        subprocess.run([python, "-m", "compileall", "-q", *map(str, folders)], check=True)
    return folders
