"""``accelerate.parallelism_config``: the mesh of data, tensor and context parallelism."""

from accel._lazy import export_table

_NAMES = {
    "ParallelismConfig": "accel_backends",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
