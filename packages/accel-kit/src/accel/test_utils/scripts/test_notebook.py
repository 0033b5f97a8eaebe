"""Accelerate's ``accelerate.test_utils.scripts.test_notebook``: a check of Accelerate itself; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "NUM_PROCESSES",
        "assert_clean_cuda_fork_function",
        "basic_function",
        "bipolar_sleep_function",
        "main",
        "require_multi_process",
        "test_c10d_rdzv_backend",
        "test_can_initialize",
        "test_clean_cuda_fork",
        "test_fault_tolerant",
        "test_monitoring",
        "test_problematic_imports",
        "test_static_rdzv_backend",
        "tough_nut_function",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
