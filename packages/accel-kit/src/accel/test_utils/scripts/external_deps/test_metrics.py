"""Accelerate's ``accelerate.test_utils.scripts.external_deps.test_metrics``:
a check of Accelerate with external libraries; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "ListHandler",
        "generate_predictions",
        "get_basic_setup",
        "get_dataloader",
        "get_mrpc_setup",
        "main",
        "test_gather_for_metrics_drop_last",
        "test_gather_for_metrics_with_iterable_dataset",
        "test_gather_for_metrics_with_non_tensor_objects_iterable_dataset",
        "test_mrpc",
        "test_torch_metrics",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
