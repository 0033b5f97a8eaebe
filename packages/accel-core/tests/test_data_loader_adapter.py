"""DataLoaderAdapter: an inner DataLoader behind an object that passes for it."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from accel_core.data_loader import (
    DataLoaderDispatcher,
    DataLoaderShard,
    DataLoaderStateMixin,
    SkipDataLoader,
    get_sampler,
)
from accel_core.data_loader.adapter import DataLoaderAdapter
from accel_ops import PartialState


@pytest.fixture(autouse=True)
def state():
    PartialState._reset_state()
    yield PartialState(cpu=True)
    PartialState._reset_state()


def test_it_passes_for_the_inner_loader():
    adapter = DataLoaderAdapter(list(range(10)), batch_size=4)
    assert isinstance(adapter, DataLoader) and isinstance(adapter, DataLoaderAdapter)
    assert type(adapter) is DataLoaderAdapter and adapter.__class__ is DataLoader
    assert len(adapter) == 3 and adapter.batch_size == 4
    assert [batch.tolist() for batch in adapter] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert not adapter.use_stateful_dataloader and not hasattr(adapter, "dl_state_dict")
    with pytest.raises(AttributeError):
        adapter.no_such_attribute  # noqa: B018


def test_it_pickles_and_copies():
    adapter = DataLoaderAdapter(list(range(6)), batch_size=3)
    restored = pickle.loads(pickle.dumps(adapter))
    assert type(restored) is DataLoaderAdapter
    assert [batch.tolist() for batch in restored] == [[0, 1, 2], [3, 4, 5]]


def test_stateful_inner_loader_saves_and_restores_its_position():
    pytest.importorskip("torchdata")
    adapter = DataLoaderAdapter(list(range(8)), use_stateful_dataloader=True, batch_size=2)
    assert adapter.state_dict() == adapter.base_dataloader.state_dict()  # recorded at creation
    iterator = iter(adapter)
    next(iterator)
    adapter._update_state_dict()  # one process: no read-ahead correction
    saved = adapter.state_dict()
    assert saved["_num_yielded"] == 1 and saved["_iterator_finished"] is False
    resumed = DataLoaderAdapter(list(range(8)), use_stateful_dataloader=True, batch_size=2)
    resumed.load_state_dict(saved)
    assert [batch.tolist() for batch in resumed] == [[2, 3], [4, 5], [6, 7]]


def test_read_ahead_correction_with_several_processes(monkeypatch, state):
    pytest.importorskip("torchdata")
    from accel_ops import DistributedType

    adapter = DataLoaderAdapter(list(range(8)), use_stateful_dataloader=True, batch_size=2)
    monkeypatch.setattr(state, "distributed_type", DistributedType.MULTI_CPU)
    monkeypatch.setattr(state, "num_processes", 3)
    adapter.dl_state_dict = {
        "_sampler_iter_yielded": 4,
        "_num_yielded": 0,
        "_index_sampler_state": {"samples_yielded": 8},
    }
    adapter.adjust_state_dict_for_prefetch()
    assert adapter.dl_state_dict == {
        "_sampler_iter_yielded": 2,
        "_num_yielded": 0,  # not positive: left alone
        "_index_sampler_state": {"samples_yielded": 4},
    }


def test_prepared_loaders_carry_the_state_mixin_and_get_sampler_finds_the_index_sampler():
    for loader_class in (DataLoaderShard, DataLoaderDispatcher, SkipDataLoader):
        assert issubclass(loader_class, DataLoaderStateMixin)
    plain = DataLoader(list(range(4)), batch_size=2, shuffle=True)
    assert isinstance(get_sampler(plain), torch.utils.data.RandomSampler)
