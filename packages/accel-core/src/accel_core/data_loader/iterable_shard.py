"""Sharding an iterable dataset: every process reads the stream, keeps its slice of each batch."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset

from accel_core.data_loader.batch_sampler import check_process_index


class IterableDatasetShard(IterableDataset):
    """Wrap an iterable dataset so that it yields only the samples of one process.

    Every process iterates the whole stream and cuts it into global batches of
    ``batch_size * num_processes`` samples (``batch_size`` with ``split_batches``); process ``p``
    keeps the ``p``-th slice of each. A short last global batch is completed with samples from the
    first global batch, unless ``drop_last`` is set, in which case it is dropped.

    Args:
        dataset: the iterable dataset to shard.
        batch_size: batch size of each process, or of the whole batch with ``split_batches``.
        drop_last: drop a short last global batch instead of completing it.
        num_processes: number of processes sharing the data.
        process_index: index of this process, in ``[0, num_processes)``.
        split_batches: ``batch_size`` is the global batch size, split across processes.

    Attributes:
        last_batch_samples: after a full pass (in this process), the number of real samples in the
            last global batch: 0 when it was full, ``-1`` before the end.
    """

    def __init__(
        self,
        dataset: IterableDataset,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
    ) -> None:
        check_process_index(num_processes, process_index, "IterableDatasetShard")
        if split_batches and batch_size % num_processes != 0:
            raise ValueError(  # Accelerate's words first
                f"To use `IterableDatasetShard` in `split_batches` mode, the batch size "
                f"({batch_size}) needs to be a round multiple of the number of processes "
                f"({num_processes}). Use a batch size divisible by {num_processes}, or "
                "split_batches=False."
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.epoch = 0
        self.last_batch_samples = -1

    @property
    def global_batch_size(self) -> int:
        """Samples consumed from the stream per step, all processes together."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def total_dataset_length(self) -> int:
        """Length of the wrapped dataset (raises ``TypeError`` when it has none)."""
        return len(self.dataset)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and pass it on to the wrapped dataset when it supports it."""
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        rounds = self.total_dataset_length / self.global_batch_size
        rounds = math.floor(rounds) if self.drop_last else math.ceil(rounds)
        return rounds * (self.global_batch_size // self.num_processes)

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            generator.manual_seed(self.epoch)
        self.last_batch_samples = -1
        size = self.global_batch_size
        share = size // self.num_processes if self.split_batches else self.batch_size
        mine = slice(share * self.process_index, share * (self.process_index + 1))
        first: list[Any] | None = None
        current: list[Any] = []
        for element in self.dataset:
            current.append(element)
            if len(current) == size:
                yield from current[mine]
                if first is None:
                    first = current
                current = []
        self.last_batch_samples = 0 if self.drop_last else len(current)
        if self.drop_last or not current:
            return
        padding = first if first is not None else list(current)
        while len(current) < size:
            current += padding
        yield from current[mine]
