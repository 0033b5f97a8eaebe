"""Accelerate's ``accelerate.test_utils.scripts.test_ops``: a check of Accelerate itself; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "create_tensor",
        "main",
        "test_broadcast",
        "test_copy_tensor_to_devices",
        "test_gather",
        "test_gather_non_contiguous",
        "test_gather_object",
        "test_op_checker",
        "test_pad_across_processes",
        "test_reduce_max",
        "test_reduce_mean",
        "test_reduce_sum",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
