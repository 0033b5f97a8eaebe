"""Module hooks for big-model inference (Accelerate's ``accelerate.hooks``)."""

from accel._lazy import export_table

_NAMES = {
    "ModelHook": "accel_bigmodel",
    "SequentialHook": "accel_bigmodel",
    "add_hook_to_module": "accel_bigmodel",
    "remove_hook_from_module": "accel_bigmodel",
    "remove_hook_from_submodules": "accel_bigmodel",
    "AlignDevicesHook": "accel_bigmodel",
    "attach_execution_device_hook": "accel_bigmodel",
    "attach_align_device_hook": "accel_bigmodel",
    "attach_align_device_hook_on_blocks": "accel_bigmodel",
    "CpuOffload": "accel_bigmodel",
    "UserCpuOffloadHook": "accel_bigmodel",
    "LayerwiseCastingHook": "accel_bigmodel",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
