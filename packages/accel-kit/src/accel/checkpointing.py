"""Checkpoint saving and loading (Accelerate's ``accelerate.checkpointing``)."""

from accel._lazy import export_table

_USE_ACCELERATOR = (
    "accel has no such function: call Accelerator.save_state / Accelerator.load_state, which "
    "write and read the same files"
)
_NAMES = {}
_UNSUPPORTED = {
    "save_accelerator_state": _USE_ACCELERATOR,
    "load_accelerator_state": _USE_ACCELERATOR,
    "save_custom_state": _USE_ACCELERATOR,
    "load_custom_state": _USE_ACCELERATOR,
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
