"""Which sample indices each process gets from BatchSamplerShard and IterableDatasetShard.

Expectations are written out by hand for datasets that do not divide evenly (82 samples, batch 16,
2 and 3 processes).
"""

from __future__ import annotations

import pytest
from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler

from accel_core.data_loader import BatchSamplerShard, IterableDatasetShard


def r(start: int, stop: int) -> list[int]:
    return list(range(start, stop))


def shards(n: int, batch_size: int, processes: int, **kwargs) -> list[list[list[int]]]:
    drop_last = kwargs.pop("drop_last", False)
    sampler = BatchSampler(SequentialSampler(range(n)), batch_size, drop_last)
    out = []
    for rank in range(processes):
        shard = BatchSamplerShard(sampler, processes, rank, **kwargs)
        batches = list(shard)
        assert len(shard) == len(batches)
        out.append(batches)
    return out


class Stream(IterableDataset):
    """An iterable dataset of 0..n-1, with or without a length."""

    def __init__(self, n: int, sized: bool = True) -> None:
        self.n = n
        self.sized = sized

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("unsized")
        return self.n


def stream_shards(n: int, batch_size: int, processes: int, **kwargs) -> list[list[int]]:
    out = []
    for rank in range(processes):
        shard = IterableDatasetShard(
            Stream(n), batch_size, num_processes=processes, process_index=rank, **kwargs
        )
        samples = list(shard)
        assert len(shard) == len(samples)
        out.append(samples)
    return out


def test_dealt_batches_even_cycles_from_the_start():
    rank0, rank1 = shards(82, 16, 2)
    assert rank0 == [r(0, 16), r(32, 48), r(64, 80)]
    assert rank1 == [r(16, 32), r(48, 64), [80, 81, *r(0, 14)]]


def test_dealt_batches_uneven_leaves_a_short_last_batch():
    rank0, rank1 = shards(82, 16, 2, even_batches=False)
    assert rank0 == [r(0, 16), r(32, 48), r(64, 80)]
    assert rank1 == [r(16, 32), r(48, 64), [80, 81]]


def test_uneven_batch_counts_differ_between_processes():
    # 80 samples = 5 full batches: process 0 gets 3, process 1 gets 2.
    rank0, rank1 = shards(80, 16, 2, even_batches=False)
    assert rank0 == [r(0, 16), r(32, 48), r(64, 80)]
    assert rank1 == [r(16, 32), r(48, 64)]
    # even_batches fills process 1's missing batch with the first samples.
    rank0, rank1 = shards(80, 16, 2)
    assert rank1 == [r(16, 32), r(48, 64), r(0, 16)]
    assert len(rank0) == 3


def test_split_batches_even():
    rank0, rank1 = shards(82, 16, 2, split_batches=True)
    assert rank0 == [r(0, 8), r(16, 24), r(32, 40), r(48, 56), r(64, 72), [80, 81, *r(0, 6)]]
    assert rank1 == [r(8, 16), r(24, 32), r(40, 48), r(56, 64), r(72, 80), r(6, 14)]


def test_split_batches_uneven():
    rank0, rank1 = shards(82, 16, 2, split_batches=True, even_batches=False)
    assert rank0[-1] == [80, 81]
    assert len(rank0) == 6
    assert rank1 == [r(8, 16), r(24, 32), r(40, 48), r(56, 64), r(72, 80)]


def test_drop_last_drops_the_incomplete_round():
    rank0, rank1 = shards(82, 16, 2, drop_last=True)
    assert rank0 == [r(0, 16), r(32, 48)]
    assert rank1 == [r(16, 32), r(48, 64)]


def test_three_processes():
    rank0, rank1, rank2 = shards(82, 16, 3)
    assert rank0 == [r(0, 16), r(48, 64)]
    assert rank1 == [r(16, 32), r(64, 80)]
    assert rank2 == [r(32, 48), [80, 81, *r(0, 14)]]
    # 100 samples: the last round has one short batch and two missing ones.
    rank0, rank1, rank2 = shards(100, 16, 3)
    assert rank0[-1] == [96, 97, 98, 99, *r(0, 12)]
    assert rank1[-1] == r(12, 28)
    assert rank2[-1] == r(28, 44)


def test_dataset_smaller_than_one_round():
    rank0, rank1 = shards(5, 4, 2)
    assert rank0 == [[0, 1, 2, 3]]
    assert rank1 == [[4, 0, 1, 2]]
    rank0, rank1 = shards(3, 4, 2)
    assert rank0 == [[0, 1, 2, 0]]
    assert rank1 == [[1, 2, 0, 1]]


def test_batch_sampler_without_batch_size():
    # A batch sampler of varying batch sizes (no batch_size attribute): whole batches are dealt.
    batches = [[0], [1, 2], [3, 4, 5]]
    rank0 = list(BatchSamplerShard(batches, 2, 0))
    rank1 = list(BatchSamplerShard(batches, 2, 1))
    assert rank0 == [[0], [3, 4, 5]]
    assert rank1 == [[1, 2], [0]]
    assert list(BatchSamplerShard(batches, 2, 1, even_batches=False)) == [[1, 2]]


def test_one_process():
    # even_batches makes every batch full, even on one process (prepare_data_loader does not
    # shard a single process's loader); without it the shard is the batch sampler itself.
    (only,) = shards(82, 16, 1, even_batches=False)
    assert only == [r(i, min(i + 16, 82)) for i in range(0, 82, 16)]
    (only,) = shards(82, 16, 1)
    assert only[-1] == [80, 81, *r(0, 14)]


def test_iterable_shard():
    rank0, rank1 = stream_shards(82, 16, 2)
    assert rank0 == [*r(0, 16), *r(32, 48), *r(64, 80)]
    assert rank1 == [*r(16, 32), *r(48, 64), 80, 81, *r(0, 14)]


def test_iterable_shard_split_batches():
    rank0, rank1 = stream_shards(82, 16, 2, split_batches=True)
    assert rank0 == [*r(0, 8), *r(16, 24), *r(32, 40), *r(48, 56), *r(64, 72), 80, 81, *r(0, 6)]
    assert rank1 == [*r(8, 16), *r(24, 32), *r(40, 48), *r(56, 64), *r(72, 80), *r(6, 14)]


def test_iterable_shard_drop_last_and_counts():
    rank0, rank1 = stream_shards(82, 16, 2, drop_last=True)
    assert rank0 == [*r(0, 16), *r(32, 48)]
    assert rank1 == [*r(16, 32), *r(48, 64)]
    shard = IterableDatasetShard(Stream(82, sized=False), 16, num_processes=2, process_index=1)
    assert shard.last_batch_samples == -1
    list(shard)
    assert shard.last_batch_samples == 18  # 82 - 2 * 32 real samples in the last global batch


def test_iterable_shard_set_epoch_reaches_the_dataset():
    class WithEpoch(Stream):
        epoch = None

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

    inner = WithEpoch(10)
    IterableDatasetShard(inner, 2, num_processes=2, process_index=0).set_epoch(3)
    assert inner.epoch == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda s: BatchSamplerShard(s, 3, 0, split_batches=True),
            r"^To use `BatchSamplerShard` in `split_batches` mode, the batch size \(16\) needs "
            r"to be a round multiple of the number of processes \(3\)",
        ),
        (lambda s: BatchSamplerShard(s, 2, 2), r"process_index must be in \[0, 1\]"),
        (lambda s: BatchSamplerShard(s, 0, 0), "num_processes must be an integer >= 1"),
        (
            lambda s: IterableDatasetShard(Stream(4), 16, num_processes=3, split_batches=True),
            r"^To use `IterableDatasetShard` in `split_batches` mode, the batch size \(16\) "
            r"needs to be a round multiple of the number of processes \(3\)",
        ),
    ],
)
def test_errors(make, message):
    sampler = BatchSampler(SequentialSampler(range(82)), 16, False)
    with pytest.raises(ValueError, match=message):
        make(sampler)


def test_prepare_data_loader_split_batches_error_has_accelerates_words():
    from torch.utils.data import DataLoader

    from accel_core.data_loader import prepare_data_loader

    with pytest.raises(
        ValueError,
        match=r"^To use `split_batches`, the batch size \(3\) needs to be a round multiple of the "
        r"number of processes \(2\)",
    ):
        prepare_data_loader(
            DataLoader(list(range(12)), batch_size=3),
            num_processes=2,
            process_index=0,
            split_batches=True,
        )


def test_a_datasets_iterable_dataset_with_enough_shards_is_sharded_natively():
    datasets = pytest.importorskip("datasets")
    from torch.utils.data import DataLoader

    from accel_core.data_loader import prepare_data_loader

    def rows(shards):
        for shard in shards:
            yield from ({"x": 10 * shard + i} for i in range(3))

    stream = datasets.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1, 2, 3]})
    assert stream.n_shards == 4
    seen = []
    for rank in range(2):
        loader = prepare_data_loader(
            DataLoader(stream, batch_size=2),
            num_processes=2,
            process_index=rank,
            put_on_device=False,
        )
        expected = [row["x"] for row in stream.shard(num_shards=2, index=rank)]
        seen.append([int(x) for batch in loader for x in batch["x"]])
        assert seen[-1] == expected  # this process's own shards, whole
    assert sorted(seen[0] + seen[1]) == sorted(row["x"] for row in stream)
