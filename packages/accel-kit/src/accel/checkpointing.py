"""Checkpoint saving and loading (Accelerate's ``accelerate.checkpointing``)."""

from accel._lazy import export_table

_NAMES = {
    "save_accelerator_state": "accel_core.checkpointing.state_functions",
    "load_accelerator_state": "accel_core.checkpointing.state_functions",
    "save_custom_state": "accel_core.checkpointing.state_functions",
    "load_custom_state": "accel_core.checkpointing.state_functions",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
