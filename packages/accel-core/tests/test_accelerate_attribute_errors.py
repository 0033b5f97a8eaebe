"""AttributeErrors as Accelerate 1.15 raises them: the state after ``_reset_state()`` and
``base_dataloader`` read on a loader class."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from accel_core import Accelerator, AcceleratorState
from accel_core.data_loader import DataLoaderDispatcher, DataLoaderShard, SkipDataLoader

RESET = "This happens if `AcceleratorState._reset_state()`"


def test_accelerator_properties_after_a_state_reset_explain_it():
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == 1
    AcceleratorState._reset_state()
    # every process-level property reads state.partial, which the reset removed; it used to
    # raise AttributeError('partial')
    for name in ("num_processes", "process_index", "is_main_process", "device"):
        with pytest.raises(AttributeError) as error:
            getattr(accelerator, name)
        message = str(error.value)
        assert message.startswith("`AcceleratorState` object has no attribute `"), name
        assert RESET in message and "create an Accelerator first" in message


def test_state_attributes_after_a_reset_as_in_accelerate():
    # Accelerate 1.15's test_accelerator_state_after_reset, step by step
    state = AcceleratorState(cpu=True)
    assert state.num_processes > 0
    with pytest.raises(AttributeError) as error:
        state.someotherthing  # noqa: B018
    assert "'AcceleratorState' object has no attribute" in str(error.value)
    assert RESET not in str(error.value)
    state._reset_state()
    with pytest.raises(AttributeError) as error:
        state.num_processes  # noqa: B018
    assert "`AcceleratorState` object has no attribute `num_processes`" in str(error.value)
    assert RESET in str(error.value)
    with pytest.raises(AttributeError, match=r"no attribute `partial`.*_reset_state"):
        state.partial  # noqa: B018
    state.someotherthing = "MyValue"
    assert state.someotherthing == "MyValue"


@pytest.mark.parametrize("loader_class", [DataLoaderShard, DataLoaderDispatcher, SkipDataLoader])
def test_base_dataloader_is_absent_on_the_class_and_the_loader_on_an_instance(loader_class):
    # Accelerate sets base_dataloader in __init__: the class has no such attribute
    with pytest.raises(AttributeError, match="has no attribute 'base_dataloader'"):
        loader_class.base_dataloader  # noqa: B018
    assert not hasattr(loader_class, "base_dataloader")
    loader = loader_class(torch.arange(4.0), batch_size=2)
    assert loader.base_dataloader is loader and isinstance(loader.base_dataloader, DataLoader)
    assert [batch.tolist() for batch in loader.base_dataloader] == [[0.0, 1.0], [2.0, 3.0]]
