"""Sharding a batch sampler: each process draws its own batches, all processes the same count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import BatchSampler, Sampler


def check_process_index(num_processes: int, process_index: int, owner: str) -> None:
    """Raise a ``ValueError`` naming ``owner`` when the process numbering is impossible."""
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"{owner}: num_processes must be an integer >= 1, got {num_processes!r}.")
    if not isinstance(process_index, int) or not 0 <= process_index < num_processes:
        raise ValueError(
            f"{owner}: process_index must be in [0, {num_processes - 1}] for "
            f"num_processes={num_processes}, got {process_index!r}."
        )


class BatchSamplerShard(BatchSampler):
    """Wrap a batch sampler so that it yields only the batches of one process.

    Without ``split_batches``, the batches of ``batch_sampler`` are dealt out in turn: process
    ``p`` gets batches ``p``, ``p + n``, ``p + 2n``... (``n = num_processes``). With
    ``split_batches``, every batch is cut into ``n`` equal slices and process ``p`` gets slice
    ``p``; the batch size must then be a multiple of ``n``.

    When the dataset does not fill the last round of batches and the sampler does not drop its
    last batch, ``even_batches=True`` completes the round with samples taken from the start of the
    first round, so every process gets the same number of batches of the same size. With
    ``even_batches=False`` nothing is added: processes may end with a shorter last batch or one
    batch fewer.

    Args:
        batch_sampler: the sampler of whole batches to shard.
        num_processes: number of processes sharing the data.
        process_index: index of this process, in ``[0, num_processes)``.
        split_batches: slice each batch across the processes instead of dealing whole batches.
        even_batches: complete the last round by cycling samples from the start.
    """

    def __init__(
        self,
        batch_sampler: BatchSampler | Any,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        check_process_index(num_processes, process_index, "BatchSamplerShard")
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last: bool = bool(getattr(batch_sampler, "drop_last", False))
        if split_batches and (self.batch_size is None or self.batch_size % num_processes != 0):
            raise ValueError(  # Accelerate's words first
                f"To use `BatchSamplerShard` in `split_batches` mode, the batch size "
                f"({self.batch_size}) needs to be a round multiple of the number of processes "
                f"({num_processes}). Use a batch size divisible by {num_processes}, or "
                "split_batches=False."
            )

    @property
    def sampler(self) -> Sampler | None:
        """The index sampler inside the wrapped batch sampler."""
        return getattr(self.batch_sampler, "sampler", None)

    @sampler.setter
    def sampler(self, sampler: Sampler) -> None:
        self.batch_sampler.sampler = sampler

    @property
    def total_length(self) -> int:
        """Number of batches of the wrapped sampler (all processes together)."""
        return len(self.batch_sampler)

    def __len__(self) -> int:
        total = len(self.batch_sampler)
        if self.split_batches:
            if self.drop_last or self.even_batches or self.batch_size is None:
                return total
            last = self._last_batch_size()
            share = self.batch_size // self.num_processes
            return (
                total - 1 if last is not None and 0 < last <= share * self.process_index else total
            )
        whole_rounds, extra = divmod(total, self.num_processes)
        if extra == 0 or self.drop_last:
            return whole_rounds
        if self.even_batches:
            return whole_rounds + 1
        return whole_rounds + (1 if self.process_index < extra else 0)

    def _last_batch_size(self) -> int | None:
        """Size of the wrapped sampler's last batch when it is short, 0 when full, else None."""
        try:
            samples = len(self.batch_sampler.sampler)
        except (AttributeError, TypeError):
            return None
        return samples % self.batch_size if self.batch_size else None

    def __iter__(self) -> Iterator[list[Any]]:
        return self._iter_split() if self.split_batches else self._iter_dealt()

    def _is_full(self, batch: list[Any]) -> bool:
        return self.batch_size is None or len(batch) == self.batch_size

    def _iter_split(self) -> Iterator[list[Any]]:
        batch_size: int = self.batch_size  # type: ignore[assignment]  # checked in __init__
        share = batch_size // self.num_processes
        mine = slice(share * self.process_index, share * (self.process_index + 1))
        first: list[Any] | None = None
        last: list[Any] | None = None
        for batch in self.batch_sampler:
            if first is None:
                first = list(batch)
            last = batch
            if len(batch) == batch_size:
                yield batch[mine]
        if self.drop_last or first is None or last is None or len(last) == batch_size:
            return
        if not self.even_batches:
            if len(last) > mine.start:
                yield last[mine]
            return
        padding = list(first)
        while len(padding) < batch_size:
            padding += first
        yield (list(last) + padding)[mine]

    def _iter_dealt(self) -> Iterator[list[Any]]:
        n, rank = self.num_processes, self.process_index
        first_round: list[Any] = []  # samples (batches when the size varies) of batches 0..n-1
        pending: list[list[Any]] = []  # batches of the round being dealt
        for index, batch in enumerate(self.batch_sampler):
            if not self.drop_last and index < n:
                if self.batch_size is None:
                    first_round.append(batch)
                else:
                    first_round.extend(batch)
            if len(pending) == n:
                pending = []  # a short batch in the middle closed a round: it is skipped
            pending.append(batch)
            if len(pending) == n and self._is_full(batch):
                yield pending[rank]
                pending = []
        if self.drop_last or not first_round or not pending:
            return
        if not self.even_batches:
            if rank < len(pending):
                yield pending[rank]
            return
        yield self._completed_round(pending, first_round)[rank]

    def _completed_round(self, pending: list[list[Any]], first_round: list[Any]) -> list[list[Any]]:
        """The last round with its short batch filled and its missing batches made up."""
        n = self.num_processes
        needed = n if self.batch_size is None else n * self.batch_size
        cycle = list(first_round)
        while len(cycle) < needed:
            cycle += first_round
        position = 0
        batches = []
        for i in range(n):
            if i < len(pending) and self._is_full(pending[i]):
                batches.append(pending[i])
            elif i < len(pending):
                missing = self.batch_size - len(pending[i])  # type: ignore[operator]
                batches.append(list(pending[i]) + cycle[position : position + missing])
                position += missing
            elif self.batch_size is None:
                batches.append(cycle[position])
                position += 1
            else:
                batches.append(cycle[position : position + self.batch_size])
                position += self.batch_size
        return batches
