"""Accelerate's ``accelerate.test_utils.scripts.external_deps.test_checkpointing``:
a check of Accelerate with external libraries; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "EVAL_BATCH_SIZE",
        "MAX_GPU_BATCH_SIZE",
        "evaluation_loop",
        "get_dataloaders",
        "main",
        "training_function",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
