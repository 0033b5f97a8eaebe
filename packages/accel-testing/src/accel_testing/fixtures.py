"""Pytest fixtures shared by the accel packages' tests, loaded as the ``accel_testing`` plugin.

``restore_environment`` and ``teardown_process_group`` are autouse: every test starts with the
environment it had before the previous one, and no process group is left behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def restore_environment() -> Iterator[None]:
    """Put ``os.environ`` back exactly as it was after each test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def teardown_process_group() -> Iterator[None]:
    """Destroy a default process group a test left behind, if torch.distributed is loaded."""
    yield
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
