"""accel: Hugging Face Accelerate's public API over small, independently installable packages.

Port a script by replacing ``accelerate`` with ``accel`` in its imports. Every name here is defined
in one of accel-ops, accel-core, accel-bigmodel, accel-backends or accel-launch and imported only
when first used.
"""

from accel._lazy import export_table

__version__ = "0.3.6"

_NAMES = {
    # accel-core
    "Accelerator": "accel_core",
    "DataLoaderConfiguration": "accel_core",
    "DistributedDataParallelKwargs": "accel_core",
    "GradScalerKwargs": "accel_core",
    "InitProcessGroupKwargs": "accel_core",
    "AutocastKwargs": "accel_core",
    "ProfileKwargs": "accel_core",
    "DDPCommunicationHookType": "accel_core",
    "DistributedType": "accel_ops",
    "GradientAccumulationPlugin": "accel_core",
    "find_executable_batch_size": "accel_core",
    "skip_first_batches": "accel_core",
    "notebook_launcher": "accel_core",
    "debug_launcher": "accel_core",
    "synchronize_rng_states": "accel_core",
    # accel-ops
    "PartialState": "accel_ops",
    # accel-bigmodel
    "init_empty_weights": "accel_bigmodel",
    "init_on_device": "accel_bigmodel",
    "cpu_offload": "accel_bigmodel",
    "cpu_offload_with_hook": "accel_bigmodel",
    "disk_offload": "accel_bigmodel",
    "dispatch_model": "accel_bigmodel",
    "load_checkpoint_and_dispatch": "accel_bigmodel",
    "load_checkpoint_in_model": "accel_bigmodel",
    "infer_auto_device_map": "accel_bigmodel",
    "prepare_pippy": "accel_bigmodel",  # pipeline inference: out of scope, raises when called
    # accel-ops
    "is_rich_available": "accel_ops",
    # accel-backends
    "DeepSpeedPlugin": "accel_backends",
    "FullyShardedDataParallelPlugin": "accel_backends",
    "ParallelismConfig": "accel_backends",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
