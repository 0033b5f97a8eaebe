"""Checkpoint saving and loading (Accelerate's ``accelerate.checkpointing``)."""

from accel._lazy import export_table

_NAMES = {}
_UNSUPPORTED = {
    "save_accelerator_state": "checkpointing is not built yet",
    "load_accelerator_state": "checkpointing is not built yet",
    "save_custom_state": "checkpointing is not built yet",
    "load_custom_state": "checkpointing is not built yet",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
