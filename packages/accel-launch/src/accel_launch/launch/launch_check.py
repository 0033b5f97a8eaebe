"""``test_launch``: Accelerate's check that a launched process can build its ``PartialState``.

It is the check ``accel test`` starts with, and like ``accel test`` (the one exception to
accel-launch importing no sibling package) it imports accel-ops only after checking that it is
installed.
"""

from __future__ import annotations

import importlib
import importlib.util

from accel_launch.errors import AccelLaunchError


def test_launch() -> None:
    """Build ``accel_ops.PartialState()`` from this process's launch environment.

    Raises ``AccelLaunchError`` when accel-ops is not installed, and whatever ``PartialState``
    raises for a launch environment it can't use (e.g. ``LaunchEnvironmentError``).
    """
    if importlib.util.find_spec("accel_ops") is None:
        raise AccelLaunchError(
            "test_launch needs accel-ops, which is not installed: pip install accel-ops"
        )
    importlib.import_module("accel_ops").PartialState()


test_launch.__test__ = False  # type: ignore[attr-defined]  # a library function, not a pytest test
