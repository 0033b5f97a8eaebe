"""``accelerate.utils.memory``: device caches and fitting a batch size into memory."""

from accel._lazy import export_table

_NAMES: dict[str, str] = {
    "clear_device_cache": "accel_ops",
    "find_executable_batch_size": "accel_core.memory",
    "release_memory": "accel_core.memory",
    "should_reduce_batch_size": "accel_core.memory",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
