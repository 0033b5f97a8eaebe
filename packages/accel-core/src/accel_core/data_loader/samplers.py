"""A random sampler whose order depends only on a seed and the epoch, the same on every process."""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` that reseeds its generator with ``data_seed + epoch`` on every pass.

    Every process that builds it with the same ``data_seed`` draws the same permutation for a given
    epoch, so sharding the permutation gives disjoint pieces of one shuffled dataset. Each full
    iteration advances the epoch by one; ``set_epoch`` sets it explicitly (for example when
    resuming). Without ``data_seed`` the seed is ``torch.initial_seed()``, which is the same on all
    processes only after a common ``set_seed``.

    Args:
        data_source: the dataset (only its length is used).
        replacement: draw with replacement.
        num_samples: number of indices per epoch (defaults to ``len(data_source)``).
        generator: the generator to reseed (one on the default device is created when ``None``).
        data_seed: base seed of the permutation.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
    ) -> None:
        super().__init__(
            data_source, replacement=replacement, num_samples=num_samples, generator=generator
        )
        self.initial_seed = int(data_seed) if data_seed is not None else torch.initial_seed()
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = torch.Generator(device=torch.get_default_device())
        self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose permutation the next iteration draws."""
        self.epoch = epoch


def get_sampler(dataloader: DataLoader) -> Sampler | None:
    """The index sampler of ``dataloader`` (inside its batch sampler), or ``None``."""
    if isinstance(dataloader.sampler, BatchSampler):
        return getattr(dataloader.sampler, "sampler", None)
    return getattr(dataloader.batch_sampler, "sampler", None)


def sampler_length(dataloader: DataLoader) -> int | None:
    """The length of the index sampler of ``dataloader``; None without one or without a length."""
    sampler = get_sampler(dataloader)
    if sampler is None:
        return None
    try:
        return len(sampler)  # type: ignore[arg-type]
    except TypeError:
        return None
