"""Accelerate's ``accelerate.test_utils.scripts.test_ddp_comm_hook``:
a check of Accelerate itself; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "MockModel",
        "main",
        "test_ddp_comm_hook",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
