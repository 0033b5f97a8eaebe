"""prepare_data_loader: turn a user's DataLoader into one that feeds this process its share."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from accel_core.data_loader.batch_sampler import BatchSamplerShard, check_process_index
from accel_core.data_loader.dispatcher import DataLoaderDispatcher
from accel_core.data_loader.factory import build_loader
from accel_core.data_loader.iterable_shard import IterableDatasetShard
from accel_core.data_loader.loader_state import dataloader_kwargs
from accel_core.data_loader.samplers import SeedableRandomSampler, get_sampler
from accel_core.data_loader.shard_loader import DataLoaderShard
from accel_core.data_loader.skip import SkipDataLoader


def is_prepared_data_loader(obj: Any) -> bool:
    """Whether ``obj`` was built by :func:`prepare_data_loader` or ``skip_first_batches``."""
    return isinstance(obj, (DataLoaderShard, DataLoaderDispatcher, SkipDataLoader))


def _rng_name(rng_type: Any) -> str:
    return str(getattr(rng_type, "value", rng_type))


def _global_batch_size(dataloader: DataLoader) -> int:
    if dataloader.batch_size is not None:
        return int(dataloader.batch_size)
    size = getattr(dataloader.batch_sampler, "batch_size", None)
    if size is None:
        size = getattr(dataloader.sampler, "batch_size", None)
    if size is None:
        raise ValueError(
            "split_batches=True needs a batch size to split, but the DataLoader's batch_size is "
            f"None and its batch sampler ({type(dataloader.batch_sampler).__name__}) has no "
            "batch_size attribute. Give the batch sampler a batch_size, or use "
            "split_batches=False."
        )
    return int(size)


def _seedable(sampler: RandomSampler, data_seed: int | None) -> SeedableRandomSampler:
    return SeedableRandomSampler(
        sampler.data_source,
        replacement=sampler.replacement,
        num_samples=sampler._num_samples,
        generator=None,  # its own generator: the user's keeps its state
        data_seed=data_seed,
    )


def _ensure_generator(sampler: Any) -> torch.Generator:
    """The sampler's generator, created from the global RNG when it has none."""
    if sampler.generator is None:
        generator = torch.Generator(device=torch.get_default_device())
        generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        sampler.generator = generator
    return sampler.generator


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[Any] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable[..., Any] | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
) -> DataLoader:
    """Wrap ``dataloader`` so that it yields only this process's batches.

    Args:
        dataloader: the loader to shard. It is not modified, except that a shuffling sampler
            without a generator gets one (so that ``rng_types=["generator"]`` can synchronise it)
            and that ``use_seedable_sampler`` replaces the ``sampler`` attribute of a custom
            batch sampler (a plain ``BatchSampler`` is rebuilt instead).
        device: where batches go when ``put_on_device`` (and for dispatching).
        num_processes, process_index: the split; default to ``PartialState()``'s values.
        split_batches: cut each batch into ``num_processes`` slices (the batch size must be a
            multiple of ``num_processes``) instead of giving each process whole batches.
        put_on_device: move batches to ``device``.
        rng_types: generators synchronised from the main process at each iteration: ``"torch"``,
            ``"cuda"``, ``"xla"``, ``"generator"`` (the sampler's or the iterable dataset's).
        dispatch_batches: read on the main process only and broadcast slices; defaults to
            ``True`` for an ``IterableDataset`` when ``put_on_device``, else ``False``.
        even_batches: complete the last round of batches with samples from the start so that
            all processes get the same number of batches (map-style datasets).
        slice_fn_for_dispatch: how the dispatcher cuts a batch (``accel_ops.slice_tensors``).
        use_seedable_sampler: replace a ``RandomSampler`` by :class:`SeedableRandomSampler`.
        data_seed: seed of that sampler (``torch.initial_seed()`` when ``None``).
        non_blocking: non-blocking host-to-device copies.
        use_stateful_dataloader: build the loader on torchdata's ``StatefulDataLoader`` (needs
            the ``stateful`` extra), so that its position is saved and restored mid-epoch.

    Returns:
        a :class:`DataLoaderShard` or :class:`DataLoaderDispatcher`.

    Raises:
        ValueError: the loader is already prepared, ``dispatch_batches`` without
            ``put_on_device``, or a batch size that ``split_batches`` cannot divide.
    """
    if is_prepared_data_loader(dataloader):
        raise ValueError(
            f"This {type(dataloader).__name__} was already prepared; preparing it again would "
            "shard the shards. Pass the original torch DataLoader to prepare_data_loader, or use "
            "the prepared one as it is."
        )
    dataset = dataloader.dataset
    iterable = isinstance(dataset, IterableDataset)
    if dispatch_batches is None:
        dispatch_batches = put_on_device and iterable
    if dispatch_batches and not put_on_device:
        raise ValueError(
            "dispatch_batches=True needs put_on_device=True: dispatched batches are broadcast "
            "from the device of the main process. Pass put_on_device=True."
        )
    if num_processes is None or process_index is None or dispatch_batches:
        from accel_ops import PartialState

        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
    check_process_index(num_processes, process_index, "prepare_data_loader")
    if split_batches:
        size = _global_batch_size(dataloader)
        if size % num_processes != 0:
            raise ValueError(  # Accelerate's words first
                f"To use `split_batches`, the batch size ({size}) needs to be a round multiple of "
                f"the number of processes ({num_processes}). Use a batch size divisible by "
                f"{num_processes}, or split_batches=False."
            )

    batch_sampler_is_sampler = isinstance(dataloader.sampler, BatchSampler)
    original_batch_sampler = (
        dataloader.sampler if batch_sampler_is_sampler else dataloader.batch_sampler
    )
    drop_last = bool(dataloader.drop_last or getattr(original_batch_sampler, "drop_last", False))
    sampler = get_sampler(dataloader)
    seedable = None
    if use_seedable_sampler and isinstance(sampler, RandomSampler):
        seedable = _seedable(sampler, data_seed)
        if type(original_batch_sampler) is BatchSampler:
            # A fresh batch sampler around the seedable one: the user's loader stays untouched.
            original_batch_sampler = BatchSampler(
                seedable, original_batch_sampler.batch_size, original_batch_sampler.drop_last
            )
            sampler, seedable = seedable, None
    new_batch_sampler = None if iterable else original_batch_sampler
    if not iterable and original_batch_sampler is None and num_processes > 1:
        raise ValueError(
            "prepare_data_loader cannot shard a map-style DataLoader with batch_size=None and no "
            "batch sampler (every item is already a batch). Give the DataLoader a batch_size, a "
            "batch_sampler, or sampler=BatchSampler(...)."
        )
    synchronized_generator = None

    if num_processes > 1 and not dispatch_batches:
        if iterable and not split_batches and _shards_natively(dataset, num_processes):
            # a datasets.IterableDataset of at least one shard (file) per process: each process
            # reads its own shards, as under Accelerate
            dataset = dataset.shard(num_shards=num_processes, index=process_index)
        elif iterable:
            if isinstance(getattr(dataset, "generator", None), torch.Generator):
                synchronized_generator = dataset.generator
            dataset = IterableDatasetShard(
                dataset,
                batch_size=dataloader.batch_size,
                drop_last=dataloader.drop_last,
                num_processes=num_processes,
                process_index=process_index,
                split_batches=split_batches,
            )
        else:
            if not use_seedable_sampler and hasattr(sampler, "generator"):
                synchronized_generator = _ensure_generator(sampler)
            new_batch_sampler = BatchSamplerShard(
                original_batch_sampler,
                num_processes=num_processes,
                process_index=process_index,
                split_batches=split_batches,
                even_batches=even_batches,
            )

    if rng_types is not None:
        rng_types = [
            r
            for r in rng_types
            if synchronized_generator is not None or _rng_name(r) != "generator"
        ]
    kwargs = dataloader_kwargs(dataloader)
    if new_batch_sampler is None:
        split_here = split_batches and not dispatch_batches and num_processes > 1
        kwargs["drop_last"] = dataloader.drop_last
        kwargs["batch_size"] = (
            dataloader.batch_size // num_processes if split_here else dataloader.batch_size
        )
    elif batch_sampler_is_sampler:  # the dataset fetches whole batches: keep that
        kwargs.update(sampler=new_batch_sampler, batch_size=dataloader.batch_size)
    else:
        kwargs["batch_sampler"] = new_batch_sampler

    prepared: DataLoaderShard | DataLoaderDispatcher
    if dispatch_batches:
        kwargs.pop("generator", None)
        prepared = build_loader(
            DataLoaderDispatcher,
            dataset,
            split_batches=split_batches,
            _drop_last=drop_last,
            _non_blocking=non_blocking,
            slice_fn=slice_fn_for_dispatch,
            use_stateful_dataloader=use_stateful_dataloader,
            **kwargs,
        )
    else:
        prepared = build_loader(
            DataLoaderShard,
            dataset,
            device=device if put_on_device else None,
            rng_types=rng_types,
            synchronized_generator=synchronized_generator,
            _drop_last=drop_last,
            _non_blocking=non_blocking,
            use_stateful_dataloader=use_stateful_dataloader,
            **kwargs,
        )
    if seedable is not None:
        prepared.set_sampler(seedable)
    return prepared


def _shards_natively(dataset: object, num_processes: int) -> bool:
    """Whether ``dataset`` is a Hugging Face ``datasets.IterableDataset`` with at least
    ``num_processes`` shards (looked up only where datasets is already imported: such a dataset
    can't exist otherwise)."""
    datasets = sys.modules.get("datasets")
    iterable_type = getattr(datasets, "IterableDataset", None)
    return (
        isinstance(iterable_type, type)
        and isinstance(dataset, iterable_type)
        and getattr(dataset, "n_shards", 0) >= num_processes
    )
