"""prepare_data_loader, DataLoaderShard, SeedableRandomSampler, skip_first_batches in one process.

Several ranks are simulated by passing ``num_processes``/``process_index`` explicitly: sharding
itself needs no process group. Real multi-process runs are in test_data_loader_multiprocess.py.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, TensorDataset

from accel_core import GradientState
from accel_core.data_loader import (
    DataLoaderShard,
    SeedableRandomSampler,
    SkipDataLoader,
    is_prepared_data_loader,
    prepare_data_loader,
    skip_first_batches,
)


@pytest.fixture(autouse=True)
def fresh_state():
    GradientState._reset_state()
    yield
    GradientState._reset_state()


class Stream(IterableDataset):
    def __init__(self, n: int, sized: bool = True) -> None:
        self.n, self.sized = n, sized

    def __iter__(self):
        return iter(torch.arange(self.n))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("unsized")
        return self.n


def numbers(n: int = 82) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def walk(loader) -> list[tuple[list[int], bool, int]]:
    """Each batch as (values, end_of_dataloader, remainder) read from GradientState."""
    state = GradientState()
    out = []
    for batch in loader:
        values = batch[0] if isinstance(batch, (list, tuple)) else batch
        assert state.active_dataloader is loader
        out.append((values.tolist(), state.end_of_dataloader, state.remainder))
    assert not state.in_dataloader
    return out


def test_sharded_loader_tracks_the_end_and_remainder():
    loader = DataLoader(numbers(), batch_size=16)
    for rank, firsts in ((0, [0, 32, 64]), (1, [16, 48, 80])):
        prepared = prepare_data_loader(loader, num_processes=2, process_index=rank)
        assert isinstance(prepared, DataLoaderShard)
        assert (len(prepared), prepared.total_batch_size, prepared.total_dataset_length) == (
            3,
            32,
            82,
        )
        steps = walk(prepared)
        assert [values[0] for values, _, _ in steps] == firsts
        assert [end for _, end, _ in steps] == [False, False, True]
        assert {remainder for _, _, remainder in steps} == {18}  # 82 - 2 * 32
    # Divisible datasets have remainder 0 (nothing duplicated); split_batches uses the batch size.
    prepared = prepare_data_loader(
        DataLoader(numbers(64), batch_size=16), num_processes=2, process_index=0
    )
    assert walk(prepared)[-1][1:] == (True, 0)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=1, split_batches=True)
    assert prepared.total_batch_size == 16
    assert walk(prepared)[-1] == (list(range(6, 14)), True, 2)


def test_breaking_out_unregisters_the_loader():
    prepared = prepare_data_loader(
        DataLoader(numbers(), batch_size=4), num_processes=1, process_index=0
    )
    for _ in prepared:
        assert GradientState().in_dataloader
        break
    assert not GradientState().in_dataloader


def test_one_process_keeps_the_original_batches():
    prepared = prepare_data_loader(
        DataLoader(numbers(), batch_size=16), num_processes=1, process_index=0
    )
    steps = walk(prepared)
    assert steps[-1] == ([80, 81], True, 2)
    assert len(steps) == 6


def test_put_on_device_moves_batches():
    loader = DataLoader(numbers(8), batch_size=4)
    prepared = prepare_data_loader(
        loader,
        device="meta",
        num_processes=1,
        process_index=0,
        put_on_device=True,
        non_blocking=True,
    )
    devices = [batch[0].device.type for batch in prepared]
    assert devices == ["meta", "meta"]
    kept = prepare_data_loader(loader, device="meta", num_processes=1, process_index=0)
    assert [batch[0].device.type for batch in kept] == ["cpu", "cpu"]


def test_loading_settings_are_kept():
    def collate(samples):
        return torch.stack([s[0] for s in samples]) * 10

    loader = DataLoader(numbers(8), batch_size=4, collate_fn=collate, pin_memory=False)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=1)
    assert prepared.collate_fn is collate
    assert [b.tolist() for b in prepared] == [[40, 50, 60, 70]]


def test_drop_last_in_the_batch_sampler_means_no_remainder():
    sampler = BatchSampler(torch.utils.data.SequentialSampler(range(82)), 16, drop_last=True)
    prepared = prepare_data_loader(
        DataLoader(numbers(), batch_sampler=sampler), num_processes=2, process_index=0
    )
    assert walk(prepared)[-1][1:] == (True, -1)


def test_iterable_dataset_sharded_per_process():
    for sized in (True, False):
        loader = DataLoader(Stream(82, sized), batch_size=16)
        got = [
            walk(prepare_data_loader(loader, num_processes=2, process_index=rank))
            for rank in (0, 1)
        ]
        assert got[1][-1] == ([80, 81, *range(14)], True, 18)
        assert [values[0] for values, _, _ in got[0]] == [0, 32, 64]
    prepared = prepare_data_loader(loader, num_processes=2, process_index=0, split_batches=True)
    assert prepared.batch_size == 8
    assert walk(prepared)[-1] == ([80, 81, 0, 1, 2, 3, 4, 5], True, 2)


def test_seedable_sampler_order_depends_on_seed_and_epoch():
    sampler = SeedableRandomSampler(range(20), data_seed=42)
    epoch0, epoch1 = list(sampler), list(sampler)  # each pass advances the epoch
    expected0 = torch.randperm(20, generator=torch.Generator().manual_seed(42)).tolist()
    assert epoch0 == expected0
    assert epoch1 == torch.randperm(20, generator=torch.Generator().manual_seed(43)).tolist()
    assert epoch0 != epoch1
    again = SeedableRandomSampler(range(20), data_seed=42)
    assert list(again) == epoch0
    again.set_epoch(1)
    assert list(again) == epoch1


def test_prepared_seedable_sampler_reshuffles_per_epoch():
    loader = DataLoader(numbers(32), batch_size=8, shuffle=True)

    def epochs(rank: int) -> list[list[int]]:
        prepared = prepare_data_loader(
            loader, num_processes=2, process_index=rank, use_seedable_sampler=True, data_seed=7
        )
        assert isinstance(prepared.get_sampler(), SeedableRandomSampler)
        return [torch.cat([b[0] for b in prepared]).tolist() for _ in range(2)]

    rank0, rank1 = epochs(0), epochs(1)
    for epoch in (0, 1):
        assert sorted(rank0[epoch] + rank1[epoch]) == list(range(32))  # disjoint halves
        permutation = torch.randperm(
            32, generator=torch.Generator().manual_seed(7 + epoch)
        ).tolist()
        assert rank0[epoch] == permutation[0:8] + permutation[16:24]
    assert rank0[0] != rank0[1]
    assert epochs(0) == rank0  # reproducible
    assert isinstance(loader.sampler, RandomSampler)  # the user's loader is untouched
    assert not isinstance(loader.batch_sampler.sampler, SeedableRandomSampler)


def test_set_epoch_reaches_the_sampler():
    loader = DataLoader(numbers(16), batch_size=4, shuffle=True)
    prepared = prepare_data_loader(
        loader, num_processes=2, process_index=0, use_seedable_sampler=True
    )
    prepared.set_epoch(5)
    assert prepared.get_sampler().epoch == 5
    assert prepared.iteration == 5


def test_skip_first_batches_plain_loaders():
    loader = DataLoader(numbers(), batch_size=16)
    skipped = skip_first_batches(loader, 4)
    assert type(skipped) is DataLoader
    assert [b[0][0].item() for b in skipped] == [64, 80]
    assert len(skipped) == 2
    stream = skip_first_batches(DataLoader(Stream(82), batch_size=16), 5)
    assert isinstance(stream, SkipDataLoader)
    assert [b.tolist() for b in stream] == [[80, 81]]


def test_skip_first_batches_prepared_loaders_resume_at_the_right_sample():
    loader = DataLoader(numbers(), batch_size=8, shuffle=True)
    for rank in (0, 1):
        prepared = prepare_data_loader(
            loader, num_processes=2, process_index=rank, use_seedable_sampler=True, data_seed=3
        )
        list(prepared)  # epoch 0
        full = [b[0].tolist() for b in prepared]  # epoch 1
        prepared.set_epoch(1)
        resumed = skip_first_batches(prepared, 2)
        assert isinstance(resumed, DataLoaderShard) and is_prepared_data_loader(resumed)
        assert len(resumed) == len(full) - 2
        steps = walk(resumed)
        assert [values for values, _, _ in steps] == full[2:]
        assert steps[-1][1:] == (True, 82 % 16)
    for rank in (0, 1):
        stream = prepare_data_loader(
            DataLoader(Stream(82), batch_size=16), num_processes=2, process_index=rank
        )
        full = [b.tolist() for b in stream]
        assert [b.tolist() for b in skip_first_batches(stream, 1)] == full[1:]


def test_errors():
    loader = DataLoader(numbers(), batch_size=15)
    with pytest.raises(
        ValueError,
        match=r"batch size \(15\) needs to be a round multiple of the number of processes \(2\)",
    ):
        prepare_data_loader(loader, num_processes=2, process_index=0, split_batches=True)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=0)
    with pytest.raises(ValueError, match="already prepared"):
        prepare_data_loader(prepared, num_processes=2, process_index=0)
    with pytest.raises(ValueError, match="needs put_on_device=True"):
        prepare_data_loader(loader, num_processes=2, process_index=0, dispatch_batches=True)
    with pytest.raises(ValueError, match=r"process_index must be in \[0, 1\]"):
        prepare_data_loader(loader, num_processes=2, process_index=5)
    with pytest.raises(ValueError, match="num_batches must be an integer >= 0"):
        skip_first_batches(loader, -1)


def test_generator_rng_is_dropped_without_a_generator_to_sync():
    prepared = prepare_data_loader(
        DataLoader(numbers(), batch_size=4),
        num_processes=1,
        process_index=0,
        rng_types=["generator"],
    )
    assert prepared.rng_types == []
    shuffled = DataLoader(numbers(), batch_size=4, shuffle=True)
    prepared = prepare_data_loader(
        shuffled, num_processes=2, process_index=0, rng_types=["generator"]
    )
    assert prepared.rng_types == ["generator"]
    assert prepared.synchronized_generator is shuffled.sampler.generator


def test_pickled_loader_iterates_the_same():
    import pickle

    prepared = prepare_data_loader(
        DataLoader(numbers(), batch_size=16), num_processes=2, process_index=1
    )
    copy = pickle.loads(pickle.dumps(prepared))
    assert copy.gradient_state.__dict__ is GradientState._shared_state
    assert walk(copy) == walk(prepared)


def test_worker_processes_load_the_same_shard():
    loader = DataLoader(numbers(), batch_size=16, num_workers=2)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=1)
    assert walk(prepared)[-1] == ([80, 81, *range(14)], True, 18)


def test_dispatcher_on_one_process():
    from accel_core.data_loader import DataLoaderDispatcher
    from accel_ops import PartialState

    try:
        loader = DataLoader(numbers(10), batch_size=4)
        prepared = prepare_data_loader(
            loader, device="cpu", put_on_device=True, dispatch_batches=True
        )
        assert isinstance(prepared, DataLoaderDispatcher)
        assert len(prepared) == 3
        steps = walk(prepared)
        assert steps == [([0, 1, 2, 3], False, 2), ([4, 5, 6, 7], False, 2), ([8, 9], True, 2)]
        resumed = skip_first_batches(prepared, 2)
        assert isinstance(resumed, DataLoaderDispatcher)
        assert walk(resumed) == steps[2:]
    finally:
        PartialState._reset_state()


def test_unbatched_map_style_loader_cannot_be_sharded():
    with pytest.raises(ValueError, match="batch_size=None and no batch sampler"):
        prepare_data_loader(
            DataLoader(numbers(), batch_size=None), num_processes=2, process_index=0
        )
