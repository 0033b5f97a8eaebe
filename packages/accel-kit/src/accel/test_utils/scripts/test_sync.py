"""Accelerate's ``accelerate.test_utils.scripts.test_sync``: a check of Accelerate itself; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "check_model_parameters",
        "get_training_setup",
        "main",
        "step_model",
        "test_dataloader_break",
        "test_distributed_sync",
        "test_distributed_sync_multiple_fwd",
        "test_gradient_accumulation",
        "test_gradient_accumulation_with_opt_and_scheduler",
        "test_noop_sync",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
