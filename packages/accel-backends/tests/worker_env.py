"""The environment the tests give worker processes started by ``accel_testing.run_workers``."""

from __future__ import annotations

import os
import sys
import tempfile


def worker_env(**extra: str) -> dict[str, str]:
    """This process's temporary folder and import path (so workers import the tests' helper
    modules, such as the worker files, as this process does), plus ``extra``."""
    return {
        "TMPDIR": os.environ.get("TMPDIR", tempfile.gettempdir()),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        **extra,
    }
