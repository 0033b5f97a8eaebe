"""The Accelerator training loop: prepare, backward, gradient accumulation, mixed precision,
data-loader sharding.

Public names are imported from their modules on first use, so importing one piece does not import
every other.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.4.7"

# public name -> module of accel_core that defines it
_EXPORTS = {
    "Accelerator": "accelerator",
    "AcceleratorState": "state",
    "GradientState": "gradient_state",
    "GradientAccumulationPlugin": "gradient_state",
    "DataLoaderConfiguration": "configuration",
    "ProjectConfiguration": "configuration",
    "TorchDynamoPlugin": "configuration",
    "DDPCommunicationHookType": "configuration",
    "LoggerType": "configuration",
    "KwargsHandler": "kwargs_handlers",
    "AutocastKwargs": "kwargs_handlers",
    "DistributedDataParallelKwargs": "kwargs_handlers",
    "GradScalerKwargs": "kwargs_handlers",
    "InitProcessGroupKwargs": "kwargs_handlers",
    "ProfileKwargs": "kwargs_handlers",
    "AcceleratedOptimizer": "optimizer",
    "AcceleratedScheduler": "scheduler",
    "get_mixed_precision_context_manager": "precision",
    "get_grad_scaler": "precision",
    "Strategy": "strategies",
    "extract_model_from_parallel": "unwrap",
    "is_compiled_module": "unwrap",
    "save": "serialization",
    "load": "serialization",
    "clean_state_dict_for_safetensors": "serialization",
    "prepare_data_loader": "data_loader",
    "skip_first_batches": "data_loader",
    "DataLoaderShard": "data_loader",
    "DataLoaderDispatcher": "data_loader",
    "BatchSamplerShard": "data_loader",
    "IterableDatasetShard": "data_loader",
    "SeedableRandomSampler": "data_loader",
    "SkipBatchSampler": "data_loader",
    "SkipDataLoader": "data_loader",
    "find_executable_batch_size": "memory",
    "release_memory": "memory",
    "set_seed": "seeding",
    "synchronize_rng_state": "seeding",
    "synchronize_rng_states": "seeding",
    "get_logger": "process_logging",
    "notebook_launcher": "launchers",
    "debug_launcher": "launchers",
    "LocalSGD": "local_sgd",
    "compile_regions": "regional_compilation",
    "compile_regions_deepspeed": "regional_compilation",
    "compile_regions_fsdp2": "regional_compilation",
    "has_compiled_regions": "regional_compilation",
    "is_repeated_blocks": "regional_compilation",
    "has_repeated_blocks": "regional_compilation",
    "get_module_children_bottom_up": "module_inspection",
    "get_module_class_from_name": "module_inspection",
    "model_has_dtensor": "module_inspection",
    "get_model_tp_size": "module_inspection",
    "TORCH_SAFE_GLOBALS": "safe_globals",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accel_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"accel_core.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
