"""Data-loader sharding (Accelerate's ``accelerate.data_loader``)."""

from accel._lazy import export_table

_NAMES = {
    "prepare_data_loader": "accel_core",
    "skip_first_batches": "accel_core",
    "DataLoaderShard": "accel_core",
    "DataLoaderDispatcher": "accel_core",
    "BatchSamplerShard": "accel_core",
    "IterableDatasetShard": "accel_core",
    "SeedableRandomSampler": "accel_core",
    "SkipBatchSampler": "accel_core",
    "SkipDataLoader": "accel_core",
    "DataLoaderAdapter": "accel_core.data_loader.adapter",
    "DataLoaderStateMixin": "accel_core.data_loader",
    "get_sampler": "accel_core.data_loader",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
