"""Accelerate's ``accelerate.test_utils.scripts.test_merge_weights``:
a check of Accelerate itself; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "TinyModel",
        "check_pytorch_weights",
        "check_safetensors_weights",
        "check_weights",
        "mock_training",
        "parser",
        "setup",
        "test_merge_weights_command_pytorch",
        "test_merge_weights_command_safetensors",
        "test_merge_weights_pytorch",
        "test_merge_weights_safetensors",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
