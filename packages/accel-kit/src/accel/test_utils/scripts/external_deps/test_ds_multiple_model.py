"""Accelerate's ``accelerate.test_utils.scripts.external_deps.test_ds_multiple_model``:
a check of Accelerate with external libraries; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "EVAL_BATCH_SIZE",
        "NoiseModel",
        "ds_config_file",
        "get_dataloaders",
        "main",
        "multiple_model_training",
        "path",
        "single_model_training",
        "test_file_dir_str",
        "test_file_path",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
