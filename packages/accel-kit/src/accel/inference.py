"""``accelerate.inference``: pipeline-parallel inference, out of scope in accel.

The names resolve (accel-bigmodel's ``pipeline_inference`` module) and raise ``OutOfScopeError``
when called, pointing at ``dispatch_model`` and ``device_map="auto"``.
"""

from accel._lazy import export_table

_NAMES = {
    "build_pipeline": "accel_bigmodel",
    "find_pippy_batch_size": "accel_bigmodel",
    "generate_device_map": "accel_bigmodel",
    "pippy_forward": "accel_bigmodel",
    "prepare_pippy": "accel_bigmodel",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
