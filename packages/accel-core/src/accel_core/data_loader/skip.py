"""Resuming mid-epoch: loaders that skip the batches already seen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset

from accel_core.data_loader.dispatcher import DataLoaderDispatcher
from accel_core.data_loader.loader_state import DataLoaderStateMixin, dataloader_kwargs
from accel_core.data_loader.shard_loader import DataLoaderShard
from accel_core.gradient_state import GradientState


class SkipBatchSampler(BatchSampler):
    """A batch sampler yielding the batches of ``batch_sampler`` after the first ``skip_batches``.

    Other attributes (``batch_size``, ``drop_last``, ``num_processes``, ``split_batches``...) are
    read from the wrapped sampler.
    """

    def __init__(self, batch_sampler: BatchSampler | Any, skip_batches: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches

    def __getattr__(self, name: str) -> Any:
        if name == "batch_sampler":  # not set yet (unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.batch_sampler, name)

    def __iter__(self) -> Iterator[list[Any]]:
        for index, batch in enumerate(self.batch_sampler):
            if index >= self.skip_batches:
                yield batch

    @property
    def total_length(self) -> int:
        """Number of batches of the wrapped sampler, skipped ones included."""
        return len(self.batch_sampler)

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip_batches)


class SkipDataLoader(DataLoader, DataLoaderStateMixin):
    """A ``DataLoader`` that drops the first ``skip_batches`` batches of each iteration.

    It still loads the skipped batches (needed for iterable datasets); for map-style datasets
    :func:`skip_first_batches` skips indices instead, without loading. With
    ``use_stateful_dataloader=True`` it is a
    :class:`~accel_core.data_loader.stateful.StatefulSkipDataLoader`.
    """

    def __init__(
        self,
        dataset: Dataset,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches
        self.gradient_state = GradientState()
        self._drop_last = bool(kwargs.get("drop_last", False))
        self.reset()

    def __iter__(self) -> Iterator[Any]:
        skip = self._batches_to_skip()
        self.begin()
        try:
            for index, batch in enumerate(super().__iter__()):
                if index >= skip:
                    yield batch
        finally:
            self.end()

    def _batches_to_skip(self) -> int:
        """Batches this iteration drops (the stateful subclass drops none after a restore)."""
        return self.skip_batches

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip_batches)

    @property
    def total_batch_size(self) -> int:
        """Samples per batch (a plain, unsharded loader)."""
        return int(self.batch_size)  # type: ignore[arg-type]

    def _samples_per_epoch(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A copy of ``dataloader`` whose next iteration starts after its first ``num_batches`` batches.

    ``num_batches`` counts the batches this process sees, so after a checkpoint taken at step
    ``k`` of an epoch, ``skip_first_batches(train_loader, k)`` resumes at step ``k``. Works on
    plain ``DataLoader`` objects and on prepared ones (sharded or dispatched), keeping their
    device, epoch and generator settings. Map-style datasets skip indices without loading them;
    iterable datasets, and dispatched loaders, load and drop the skipped batches. The skip applies
    to every iteration of the returned loader: iterate the original loader for later epochs.
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ValueError(
            f"skip_first_batches: num_batches must be an integer >= 0, got {num_batches!r}."
        )
    dataset = dataloader.dataset
    kwargs = dataloader_kwargs(dataloader)
    # A dispatcher reads the skipped steps on the main process: it needs the first batch to
    # complete a short last batch exactly as an uninterrupted epoch would.
    skip_by_loading = isinstance(dataset, IterableDataset) or isinstance(
        dataloader, DataLoaderDispatcher
    )
    batch_sampler_is_sampler = isinstance(dataloader.sampler, BatchSampler)
    if isinstance(dataset, IterableDataset):
        new_batch_sampler = None
        kwargs.update(batch_size=dataloader.batch_size, drop_last=dataloader.drop_last)
    else:
        source = dataloader.sampler if batch_sampler_is_sampler else dataloader.batch_sampler
        new_batch_sampler = (
            source if skip_by_loading else SkipBatchSampler(source, skip_batches=num_batches)
        )
        if batch_sampler_is_sampler:
            kwargs.update(sampler=new_batch_sampler, batch_size=dataloader.batch_size)
        else:
            kwargs.update(batch_sampler=new_batch_sampler)

    if isinstance(dataloader, DataLoaderDispatcher):
        kwargs.pop("generator", None)
        return DataLoaderDispatcher(
            dataset,
            split_batches=dataloader.split_batches,
            skip_batches=num_batches,
            _drop_last=dataloader._drop_last,
            _non_blocking=dataloader._non_blocking,
            slice_fn=dataloader.slice_fn,
            _progress=dataloader.progress,
            **kwargs,
        )
    if isinstance(dataloader, DataLoaderShard):
        return DataLoaderShard(
            dataset,
            device=dataloader.device,
            rng_types=dataloader.rng_types,
            synchronized_generator=dataloader.synchronized_generator,
            skip_batches=num_batches if skip_by_loading else 0,
            _drop_last=dataloader._drop_last,
            _non_blocking=dataloader._non_blocking,
            _progress=dataloader.progress,
            _skipped_by_sampler=0 if skip_by_loading else num_batches,
            **kwargs,
        )
    if skip_by_loading:
        return SkipDataLoader(dataset, skip_batches=num_batches, **kwargs)
    return DataLoader(dataset, **kwargs)
