"""DataLoaderShard: a DataLoader over this process's shard that moves batches to the device."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from accel_core.data_loader.iterable_shard import IterableDatasetShard
from accel_core.data_loader.loader_state import DataLoaderStateMixin
from accel_core.data_loader.progress import LoaderProgress, TracksProgress, restore_positioned
from accel_core.data_loader.samplers import get_sampler, sampler_length
from accel_core.gradient_state import GradientState


class DataLoaderShard(DataLoader, DataLoaderStateMixin, TracksProgress):
    """A ``DataLoader`` that yields this process's batches and places them on ``device``.

    Build it with a sharded batch sampler (:class:`BatchSamplerShard`) or a sharded iterable
    dataset (:class:`IterableDatasetShard`); :func:`prepare_data_loader` does that. On top of a
    plain ``DataLoader`` it:

    - synchronises the random generators named in ``rng_types`` from the main process at the
      start of each iteration (so shuffling samplers draw the same permutation everywhere);
    - calls ``set_epoch`` on the sampler or dataset with its iteration count;
    - reads one batch ahead, so that ``end_of_dataloader`` is already true when the last batch is
      yielded, and registers itself with ``GradientState`` while iterating;
    - sends each batch to ``device`` (``non_blocking`` when asked) before yielding it.

    Args:
        dataset: the dataset (possibly an ``IterableDatasetShard``).
        device: where batches go; ``None`` leaves them where the collate function put them.
        rng_types: generators to synchronise: ``"torch"``, ``"cuda"``, ``"xla"``, ``"generator"``.
        synchronized_generator: the ``torch.Generator`` synchronised for ``"generator"``.
        skip_batches: batches to skip at the start of each iteration.
        use_stateful_dataloader: build a
            :class:`~accel_core.data_loader.stateful.StatefulDataLoaderShard` (a torchdata
            ``StatefulDataLoader`` too) that saves and restores its position mid-epoch.
        iteration: the epoch the next iteration starts from.
        **kwargs: every other ``DataLoader`` argument (``batch_sampler``, ``num_workers``...).
    """

    def __init__(
        self,
        dataset: Dataset,
        device: torch.device | str | None = None,
        rng_types: Sequence[Any] | None = None,
        synchronized_generator: torch.Generator | None = None,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        iteration: int = 0,
        _progress: LoaderProgress | None = None,
        _skipped_by_sampler: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self.progress = _progress if _progress is not None else LoaderProgress(epoch=iteration)
        self._skipped_by_sampler = _skipped_by_sampler
        self.device = device
        self.rng_types = list(rng_types) if rng_types is not None else None
        self.synchronized_generator = synchronized_generator
        self.skip_batches = skip_batches
        self.gradient_state = GradientState()
        self._drop_last = _drop_last
        self._non_blocking = _non_blocking
        self.reset()

    def _batches_already_consumed(self) -> int:
        """Batches of the epoch this iteration starts after (the resume point must match)."""
        return self._skipped_by_sampler + self.skip_batches

    def __iter__(self) -> Iterator[Any]:
        if self.gradient_state._iteration_starting(self):
            return  # an epoch finished before an auto-resume (accel_core.auto_resume)
        if self.rng_types:
            from accel_core.seeding import synchronize_rng_states

            synchronize_rng_states(self.rng_types, self.synchronized_generator)
        progress = self.progress
        skipped = self._batches_already_consumed()
        resume = progress.resume_here(skipped, type(self).__name__, self.synchronized_generator)
        self.begin()
        try:
            self.set_epoch(progress.epoch)
            progress.start(skipped, self.synchronized_generator)
            batches = super().__iter__()
            try:
                current = next(batches)
            except StopIteration:
                restore_positioned(resume)
                progress.finish()
                return
            index = 0
            while True:
                if self.device is not None:
                    current = self._to_device(current)
                if resume is not None and index >= self.skip_batches:
                    # Positioned: from here on the random numbers are the checkpoint's.
                    restore_positioned(resume)
                    resume = None
                self._before_read_ahead()
                try:
                    upcoming = next(batches)
                except StopIteration:
                    self.end_of_dataloader = True
                    self._remainder_from_stream()
                    if index >= self.skip_batches:
                        progress.batches += 1
                        yield current
                        self.gradient_state._batch_requested()
                    break
                if index >= self.skip_batches:
                    progress.batches += 1
                    yield current
                    self.gradient_state._batch_requested()
                index += 1
                current = upcoming
            restore_positioned(resume)
            progress.finish()
        finally:
            self.end()

    def _before_read_ahead(self) -> None:
        """Called before each batch is read ahead (the stateful subclass records its state)."""

    def _to_device(self, batch: Any) -> Any:
        from accel_ops import send_to_device

        return send_to_device(batch, self.device, non_blocking=self._non_blocking)

    def _remainder_from_stream(self) -> None:
        # An unsized iterable dataset: its shard counted the last batch's samples while being read
        # (in this process only, hence num_workers == 0).
        if (
            self.remainder == -1
            and not self._drop_last
            and self.num_workers == 0
            and isinstance(self.dataset, IterableDatasetShard)
            and self.dataset.last_batch_samples >= 0
        ):
            self.remainder = self.dataset.last_batch_samples

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip_batches)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the loader and of its sampler (or dataset) for the next iteration."""
        self.iteration = epoch
        found = False
        for owner in (self.batch_sampler, get_sampler(self)):
            if owner is not None and hasattr(owner, "set_epoch"):
                owner.set_epoch(epoch)
                found = True
        if not found and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    @property
    def _batch_sampler_in_use(self) -> Any:
        return self.sampler if isinstance(self.sampler, BatchSampler) else self.batch_sampler

    @property
    def total_batch_size(self) -> int:
        """Samples per step, all processes together."""
        if isinstance(self.dataset, IterableDatasetShard):
            return self.dataset.global_batch_size
        batch_sampler = self._batch_sampler_in_use
        if batch_sampler is None:
            return int(self.batch_size)  # type: ignore[arg-type]
        if getattr(batch_sampler, "split_batches", False):
            return int(batch_sampler.batch_size)
        return int(batch_sampler.batch_size) * getattr(batch_sampler, "num_processes", 1)

    @property
    def total_dataset_length(self) -> int:
        """Length of the whole dataset (all processes together)."""
        if hasattr(self.dataset, "total_dataset_length"):
            return int(self.dataset.total_dataset_length)
        return len(self.dataset)  # type: ignore[arg-type]

    def _samples_per_epoch(self) -> int:
        if isinstance(self.dataset, IterableDatasetShard):
            return self.total_dataset_length
        length = sampler_length(self)
        return self.total_dataset_length if length is None else length

    def get_sampler(self) -> Sampler | None:
        """The index sampler feeding the (sharded) batch sampler."""
        return get_sampler(self)

    def set_sampler(self, sampler: Sampler) -> None:
        """Replace the index sampler inside the (sharded) batch sampler."""
        batch_sampler = self._batch_sampler_in_use
        batch_sampler.sampler = sampler
        inner = getattr(batch_sampler, "batch_sampler", None)
        if inner is not None and hasattr(inner, "sampler"):
            inner.sampler = sampler
