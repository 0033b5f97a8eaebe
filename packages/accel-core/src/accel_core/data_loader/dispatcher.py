"""DataLoaderDispatcher: the main process loads every batch and hands each process its slice."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from accel_core.data_loader.loader_state import DataLoaderStateMixin
from accel_core.data_loader.progress import LoaderProgress, TracksProgress, restore_positioned
from accel_core.data_loader.samplers import get_sampler, sampler_length
from accel_core.gradient_state import GradientState

SliceFn = Callable[..., Any]

# What the main process announces before each step (see DataLoaderDispatcher._fetch).
_SAME, _NEW, _END, _FAILED = 0, 1, 2, 3


def _same_layout(layout: Any, previous: Any) -> bool:
    try:
        return previous is not None and bool(layout == previous)
    except Exception:  # leaves that do not compare to one bool (arrays): send the layout again
        return False


def _is_datapipe(dataset: Any) -> bool:
    # Creating a DataLoader iterator over a DataPipe runs a collective (seed sharing) on every
    # process, so every process must create one even though only the main one reads from it.
    try:
        from torch.utils.data import IterDataPipe
    except ImportError:
        return False
    return isinstance(dataset, IterDataPipe)


class DataLoaderDispatcher(DataLoader, DataLoaderStateMixin, TracksProgress):
    """A ``DataLoader`` read on the main process only, whose batches are broadcast and sliced.

    Process 0 reads one batch (``split_batches=True``) or ``num_processes`` batches concatenated
    (``split_batches=False``), broadcasts the result, and every process keeps slice
    ``process_index`` of it. Use it for datasets that cannot be sharded (a stream read once, a
    generator with side effects). Every batch must be made of tensors (nested in lists, tuples or
    dicts) whose first dimension is the batch; batches of one step must have the same shape.

    A last global batch whose size does not divide by ``num_processes`` is completed with the
    first samples of the epoch (unless the original loader dropped its last batch).
    ``remainder`` then holds the real size of that last global batch.

    Args:
        dataset: the dataset read on the main process.
        split_batches: slice each batch of the loader across processes instead of concatenating
            ``num_processes`` batches.
        skip_batches: steps to skip at the start of each iteration: the main process still
            reads them (so that a short last batch is completed with the same first samples as
            without skipping) but does not send them.
        use_stateful_dataloader: build a
            :class:`~accel_core.data_loader.stateful.StatefulDataLoaderDispatcher` (a torchdata
            ``StatefulDataLoader`` too) whose main process saves and restores its position.
        slice_fn: ``slice_fn(batch, slice, process_index=, num_processes=)`` that cuts a batch;
            defaults to ``accel_ops.slice_tensors``.
        iteration: the epoch the next iteration starts from.
        **kwargs: every other ``DataLoader`` argument.

    Like :class:`DataLoaderShard` it keeps a
    :class:`~accel_core.data_loader.progress.LoaderProgress` (shared with its
    ``skip_first_batches`` copies), so that a checkpoint taken mid-epoch resumes with the epoch's
    order even when the sampler draws it from the global generator.
    """

    def __init__(
        self,
        dataset: Dataset,
        split_batches: bool = False,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        slice_fn: SliceFn | None = None,
        iteration: int = 0,
        _progress: LoaderProgress | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        from accel_ops import slice_tensors

        self.split_batches = split_batches
        self.skip_batches = skip_batches
        self.gradient_state = GradientState()
        self._drop_last = _drop_last
        self._non_blocking = _non_blocking
        self.slice_fn: SliceFn = slice_tensors if slice_fn is None else slice_fn
        self.progress = _progress if _progress is not None else LoaderProgress(epoch=iteration)
        self._layout: Any = None  # the batch layout the other processes last received
        self._first_samples: Any = None  # the epoch's first samples (complete a short last batch)
        self.reset()

    def _batches_already_consumed(self) -> int:
        """Steps of the epoch this iteration starts after (the resume point must match)."""
        return self.skip_batches

    @property
    def state(self) -> Any:
        """The process state (``accel_ops.PartialState``): rank, world size, device."""
        from accel_ops import PartialState

        return PartialState()

    def _fetch(self, iterator: Iterator[Any] | None) -> tuple[Any, Any]:
        """The next global batch (main process; ``None`` elsewhere) and, everywhere, its layout.

        The layout is ``None`` once the main process has nothing left to send. Each step costs one
        one-number broadcast (same layout, new layout, end, failure); the layout itself is sent
        only when it changes, and a loading error on the main process is raised everywhere
        instead of leaving the other processes waiting.
        """
        from accel_ops import broadcast, broadcast_object_list, concatenate, get_data_structure

        state = self.state
        batch, failure, layout, code = None, None, None, _SAME
        if iterator is not None and state.process_index == 0:
            self._before_read_ahead()
            try:
                batch = self._read_global_batch(iterator, concatenate)
            except Exception as error:
                failure = error
            if failure is not None:
                code = _FAILED
            elif batch is None:
                code = _END
            else:
                layout = get_data_structure(batch)
                code = _SAME if _same_layout(layout, self._layout) else _NEW
        signal = torch.tensor([code], dtype=torch.int64, device=state.device)
        code = int(broadcast(signal, from_process=0).item())
        if code in (_NEW, _FAILED):
            message = None if failure is None else f"{type(failure).__name__}: {failure}"
            payload = broadcast_object_list([layout if code == _NEW else message], from_process=0)
            if code == _NEW:
                self._layout = payload[0]
            elif failure is not None:
                raise failure
            else:
                raise RuntimeError(
                    f"DataLoaderDispatcher: the main process failed to load a batch "
                    f"({payload[0]}); see its traceback."
                )
        if code == _END:
            return None, None
        return batch, self._layout

    def _before_read_ahead(self) -> None:
        """Called on the main process before each global batch is read (the stateful subclass
        records its position)."""

    def _read_global_batch(self, iterator: Iterator[Any], concatenate: Callable[..., Any]) -> Any:
        wanted = 1 if self.split_batches else self.state.num_processes
        pieces = []
        for _ in range(wanted):
            try:
                pieces.append(next(iterator))
            except StopIteration:
                break
        if not pieces or (len(pieces) < wanted and self._drop_last):
            return None
        return pieces[0] if len(pieces) == 1 else self._concatenate(concatenate, pieces)

    @staticmethod
    def _concatenate(concatenate: Callable[..., Any], pieces: list[Any]) -> Any:
        try:
            return concatenate(pieces, dim=0)
        except RuntimeError as error:
            raise RuntimeError(
                "DataLoaderDispatcher could not concatenate batches of different shapes. Pass "
                "split_batches=True (the main process then slices one full batch), or "
                "dispatch_batches=False so that each process loads its own batches."
            ) from error

    def __iter__(self) -> Iterator[Any]:
        from accel_ops import (
            broadcast,
            concatenate,
            find_batch_size,
            initialize_tensors,
            send_to_device,
        )

        if self.gradient_state._iteration_starting(self):
            return  # an epoch finished before an auto-resume (accel_core.auto_resume)
        rank, world = self.state.process_index, self.state.num_processes
        self._layout = None
        progress = self.progress
        skipped = self._batches_already_consumed()
        resume = progress.resume_here(skipped, type(self).__name__, None)
        self.begin()
        try:
            self.set_epoch(progress.epoch)
            progress.start(skipped, None)
            iterator = super().__iter__() if rank == 0 or _is_datapipe(self.dataset) else None
            batch, layout = self._fetch(iterator)
            first_samples = self._first_samples = self._restored_first_samples()
            index = 0
            while layout is not None:
                skipping = index < self.skip_batches
                if skipping and (first_samples is not None or self._drop_last):
                    # Read and dropped on the main process; nothing to send.
                    batch, layout = self._fetch(iterator)
                    index += 1
                    continue
                if rank != 0:
                    batch = initialize_tensors(layout)
                batch = send_to_device(batch, self.state.device, non_blocking=self._non_blocking)
                batch = broadcast(batch, from_process=0)
                if first_samples is None and not self._drop_last:
                    # Kept to complete a short last batch, even when this step is skipped.
                    first_samples = self._first_samples = self._cut(batch, slice(0, world))
                if skipping:
                    batch, layout = self._fetch(iterator)
                    index += 1
                    continue
                if resume is not None:
                    # Positioned: from here on the random numbers are the checkpoint's.
                    restore_positioned(resume)
                    resume = None
                observed = find_batch_size(batch)
                upcoming, upcoming_layout = self._fetch(iterator)
                is_last = upcoming_layout is None
                share = observed // world
                if is_last and not self._drop_last and observed % world != 0:
                    batch = concatenate([batch, first_samples], dim=0)
                    share += 1
                mine = self._cut(batch, slice(rank * share, (rank + 1) * share))
                if is_last:
                    self.end_of_dataloader = True
                    self.remainder = observed
                progress.batches += 1
                yield mine
                self.gradient_state._batch_requested()
                index += 1
                batch, layout = upcoming, upcoming_layout
            restore_positioned(resume)
            progress.finish()
        finally:
            self.end()

    def _restored_first_samples(self) -> Any:
        """The epoch's first samples when a restored position resumes it (the stateful
        subclass), else ``None``: they complete a short last batch."""
        return None

    def _cut(self, batch: Any, part: slice) -> Any:
        return self.slice_fn(
            batch,
            part,
            process_index=self.state.process_index,
            num_processes=self.state.num_processes,
        )

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the loader and of its sampler (or dataset) for the next iteration."""
        self.iteration = epoch
        sampler = get_sampler(self)
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        elif hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        batches = super().__len__()
        if not self.split_batches:
            rounds = batches / self.state.num_processes
            batches = math.floor(rounds) if self._drop_last else math.ceil(rounds)
        return max(0, batches - self.skip_batches)

    @property
    def _base_batch_size(self) -> int:
        if self.batch_size is not None:
            return int(self.batch_size)
        return int(self.batch_sampler.batch_size)  # type: ignore[union-attr]

    @property
    def total_batch_size(self) -> int:
        """Samples per step, all processes together."""
        if self.split_batches:
            return self._base_batch_size
        return self._base_batch_size * self.state.num_processes

    @property
    def total_dataset_length(self) -> int:
        """Length of the dataset read on the main process."""
        return len(self.dataset)  # type: ignore[arg-type]

    def _samples_per_epoch(self) -> int:
        length = sampler_length(self)
        return self.total_dataset_length if length is None else length

    def get_sampler(self) -> Sampler | None:
        """The index sampler of the loader read on the main process."""
        return get_sampler(self)

    def set_sampler(self, sampler: Sampler) -> None:
        """Replace the index sampler of the loader read on the main process."""
        if self.batch_sampler is not None:
            self.batch_sampler.sampler = sampler
