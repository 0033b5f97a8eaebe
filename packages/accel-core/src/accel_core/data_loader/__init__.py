"""Data loading across processes: sharded samplers and datasets, prepared loaders, resuming.

``prepare_data_loader`` turns a torch ``DataLoader`` into a :class:`DataLoaderShard` (each process
reads its own share through :class:`BatchSamplerShard` or :class:`IterableDatasetShard`) or a
:class:`DataLoaderDispatcher` (the main process reads and broadcasts). ``skip_first_batches``
resumes mid-epoch. See docs/guides/data-loading.md.
"""

from accel_core.data_loader.batch_sampler import BatchSamplerShard
from accel_core.data_loader.dispatcher import DataLoaderDispatcher

# The factory registers how `DataLoaderShard(..., use_stateful_dataloader=True)` finds its class.
from accel_core.data_loader.factory import build_loader as _build_loader  # noqa: F401
from accel_core.data_loader.iterable_shard import IterableDatasetShard
from accel_core.data_loader.loader_state import DataLoaderStateMixin
from accel_core.data_loader.prepare import is_prepared_data_loader, prepare_data_loader
from accel_core.data_loader.samplers import SeedableRandomSampler, get_sampler
from accel_core.data_loader.shard_loader import DataLoaderShard
from accel_core.data_loader.skip import SkipBatchSampler, SkipDataLoader, skip_first_batches

__all__ = [
    "BatchSamplerShard",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "DataLoaderStateMixin",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "get_sampler",
    "is_prepared_data_loader",
    "prepare_data_loader",
    "skip_first_batches",
]
