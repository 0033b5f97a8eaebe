"""``use_stateful_dataloader=True`` on every prepared loader: the shard, the dispatcher and the
skipping loader are torchdata ``StatefulDataLoader`` s whose positions match torchdata's own.

The reference is a plain ``StatefulDataLoader`` over the same data: after the same batches the
state dicts are equal, and every loader restored from that state yields the same remaining
batches (Accelerate's observable behaviour, measured against Accelerate 1.15).
"""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler

from accel_core import Accelerator, DataLoaderConfiguration
from accel_core.data_loader import (
    DataLoaderDispatcher,
    DataLoaderShard,
    DataLoaderStateMixin,
    SkipDataLoader,
    skip_first_batches,
)

torchdata = pytest.importorskip("torchdata.stateful_dataloader")
StatefulDataLoader = torchdata.StatefulDataLoader

LOADER_CLASSES = [DataLoaderShard, DataLoaderDispatcher, SkipDataLoader]
IDS = ["shard", "dispatcher", "skip"]


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(42)


def _same_state(a, b) -> bool:
    """Equal state dicts (tensors compared by value)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


def _values(loader, count: int | None = None) -> list[list[int]]:
    batches = []
    for batch in loader:
        batches.append(batch.tolist())
        if count is not None and len(batches) == count:
            break
    return batches


@pytest.mark.parametrize("loader_class", LOADER_CLASSES, ids=IDS)
def test_built_stateful_it_is_both_the_accel_loader_and_a_stateful_dataloader(loader_class):
    dataset = list(range(16))
    batch_sampler = BatchSampler(SequentialSampler(dataset), batch_size=4, drop_last=False)
    loader = loader_class(dataset, batch_sampler=batch_sampler, use_stateful_dataloader=True)
    assert isinstance(loader, StatefulDataLoader)
    assert isinstance(loader, loader_class) and isinstance(loader, DataLoaderStateMixin)
    assert loader.use_stateful_dataloader is True
    assert loader.base_dataloader is loader and isinstance(
        loader.base_dataloader, StatefulDataLoader
    )
    plain = loader_class(dataset, batch_sampler=batch_sampler)
    assert not isinstance(plain, StatefulDataLoader) and plain.use_stateful_dataloader is False
    assert plain.base_dataloader is plain


@pytest.mark.parametrize("num_workers", [0, 2])
def test_positions_and_resumes_match_torchdata(num_workers):
    dataset = list(range(64))
    kwargs = {"batch_size": 4, "num_workers": num_workers, "shuffle": True}
    reference = StatefulDataLoader(dataset, generator=_generator(), **kwargs)
    loaders = [
        cls(dataset, generator=_generator(), use_stateful_dataloader=True, **kwargs)
        for cls in LOADER_CLASSES
    ]
    expected = _values(reference, 8)
    for loader in loaders:
        assert _values(loader, 8) == expected, type(loader).__name__
    saved = reference.state_dict()
    for loader in loaders:
        assert _same_state(loader.state_dict(), saved), type(loader).__name__

    restored_reference = StatefulDataLoader(dataset, generator=_generator(), **kwargs)
    restored_reference.load_state_dict(saved)
    rest = _values(restored_reference)
    assert len(rest) == 8
    skipping = SkipDataLoader(
        dataset, generator=_generator(), skip_batches=8, use_stateful_dataloader=True, **kwargs
    )
    assert _values(skipping) == rest
    for cls in LOADER_CLASSES:
        restored = cls(dataset, generator=_generator(), use_stateful_dataloader=True, **kwargs)
        restored.load_state_dict(saved)
        assert _values(restored) == rest, cls.__name__


@pytest.mark.parametrize("loader_class", [DataLoaderShard, DataLoaderDispatcher], ids=IDS[:2])
def test_end_of_dataloader_and_the_finished_mark(loader_class):
    loader = loader_class(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    ends, states = [], []
    for _ in loader:
        ends.append(loader.end_of_dataloader)
        states.append(loader.state_dict())
    assert ends == [False, False, False, True]
    assert [s["_num_yielded"] for s in states] == [1, 2, 3, 4]
    # Saved on the last batch, the position says the epoch is over: a restored loader runs the
    # next epoch in full instead of an empty one.
    assert [s["_iterator_finished"] for s in states] == [False, False, False, True]
    restored = loader_class(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    restored.load_state_dict(states[-1])
    assert len(_values(restored)) == 4

    restored = loader_class(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    restored.load_state_dict(states[1])
    ends = []
    for batch in restored:
        ends.append((batch.tolist(), restored.end_of_dataloader))
    assert ends == [([8, 9, 10, 11], False), ([12, 13, 14, 15], True)]


def test_a_position_survives_an_abandoned_iteration_closed_late():
    loader = DataLoaderShard(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    abandoned = iter(loader)
    next(abandoned)
    live = iter(loader)
    next(live)
    next(live)
    abandoned.close()  # the garbage collector closes the old iteration while the new one runs
    assert loader.state_dict()["_num_yielded"] == 2


def test_the_skipping_loader_skips_once_and_not_again_after_a_restore():
    loader = SkipDataLoader(
        list(range(16)), batch_size=4, skip_batches=2, use_stateful_dataloader=True
    )
    assert len(loader) == 2
    assert _values(loader) == [[8, 9, 10, 11], [12, 13, 14, 15]]
    loader = SkipDataLoader(
        list(range(16)), batch_size=4, skip_batches=1, use_stateful_dataloader=True
    )
    assert _values(loader, 1) == [[4, 5, 6, 7]]
    saved = loader.state_dict()
    assert saved["_num_yielded"] == 2  # the skipped batch was read too
    restored = SkipDataLoader(
        list(range(16)), batch_size=4, skip_batches=1, use_stateful_dataloader=True
    )
    restored.load_state_dict(saved)
    assert _values(restored) == [[8, 9, 10, 11], [12, 13, 14, 15]]
    assert _values(restored) == [[4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_a_subclass_keeps_its_own_methods():
    class Doubling(DataLoaderShard):
        def _to_device(self, batch):
            return super()._to_device(batch) * 2

    loader = Doubling(list(range(8)), batch_size=4, device="cpu", use_stateful_dataloader=True)
    assert isinstance(loader, Doubling) and isinstance(loader, StatefulDataLoader)
    assert type(loader) is type(
        Doubling(list(range(8)), batch_size=4, device="cpu", use_stateful_dataloader=True)
    )
    assert _values(loader) == [[0, 2, 4, 6], [8, 10, 12, 14]]


@pytest.mark.parametrize("loader_class", LOADER_CLASSES, ids=IDS)
def test_the_factory_and_the_class_call_build_the_same_class(loader_class):
    from accel_core.data_loader.factory import build_loader
    from accel_core.data_loader.factory import loader_class as chosen_class

    built = build_loader(loader_class, list(range(8)), batch_size=4, use_stateful_dataloader=True)
    called = loader_class(list(range(8)), batch_size=4, use_stateful_dataloader=True)
    assert type(built) is type(called) is chosen_class(loader_class, True)
    assert isinstance(built, loader_class) and isinstance(built, StatefulDataLoader)
    assert built.use_stateful_dataloader
    plain = build_loader(loader_class, list(range(8)), batch_size=4)
    assert type(plain) is loader_class and not plain.use_stateful_dataloader
    assert _values(built) == _values(plain) == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("loader_class", LOADER_CLASSES, ids=IDS)
def test_stateful_loaders_pickle_with_their_position(loader_class):
    loader = loader_class(list(range(12)), batch_size=3, use_stateful_dataloader=True)
    _values(loader, 1)
    restored = pickle.loads(pickle.dumps(loader))
    assert type(restored) is type(loader) and isinstance(restored, StatefulDataLoader)
    assert _values(restored) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_skip_first_batches_of_a_stateful_loader_is_a_plain_copy_as_in_accelerate():
    loader = DataLoaderShard(list(range(10)), batch_size=2, use_stateful_dataloader=True)
    skipped = skip_first_batches(loader, 2)
    assert type(skipped) is DataLoaderShard and not isinstance(skipped, StatefulDataLoader)
    assert _values(skipped) == [[4, 5], [6, 7], [8, 9]]


@pytest.mark.parametrize("dispatch_batches", [False, True], ids=["shard", "dispatcher"])
def test_save_state_and_load_state_carry_the_position(tmp_path, dispatch_batches):
    config = DataLoaderConfiguration(
        dispatch_batches=dispatch_batches, use_stateful_dataloader=True
    )
    data = torch.utils.data.TensorDataset(torch.arange(20.0))

    def prepared():
        accelerator = Accelerator(dataloader_config=config)
        loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
        return accelerator, accelerator.prepare(loader)

    accelerator, loader = prepared()
    assert isinstance(loader, StatefulDataLoader)
    expected = DataLoaderDispatcher if dispatch_batches else DataLoaderShard
    assert isinstance(loader, expected)
    torch.manual_seed(7)
    seen = []
    for (batch,) in loader:
        seen.append(batch.tolist())
        if len(seen) == 2:
            accelerator.save_state(tmp_path / "checkpoint")
    accelerator.end_training()
    del accelerator
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator, loader = prepared()
    torch.manual_seed(8)
    accelerator.load_state(tmp_path / "checkpoint")
    assert [batch.tolist() for (batch,) in loader] == seen[2:]
