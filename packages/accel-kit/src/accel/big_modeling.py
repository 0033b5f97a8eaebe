"""Big-model inference functions (Accelerate's ``accelerate.big_modeling``)."""

from accel._lazy import export_table, replaceable_names

_NAMES = {
    "init_empty_weights": "accel_bigmodel",
    "init_on_device": "accel_bigmodel",
    "cpu_offload": "accel_bigmodel",
    "cpu_offload_with_hook": "accel_bigmodel",
    "disk_offload": "accel_bigmodel",
    "dispatch_model": "accel_bigmodel",
    "load_checkpoint_and_dispatch": "accel_bigmodel",
    "attach_layerwise_casting_hooks": "accel_bigmodel",
    "check_device_map": "accel_bigmodel.dispatch:check_device_map",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)

#: transformers replaces ``check_device_map`` here for a dispatch that places some parameters
#: itself; ``dispatch_model`` looks it up in its own module when called, as Accelerate's does.
replaceable_names(__name__, {"check_device_map": "accel_bigmodel.dispatch:check_device_map"})
