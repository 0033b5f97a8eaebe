"""GradientState's shared state, plugin values and data-loader tracking."""

from __future__ import annotations

import gc

import pytest

from accel_core import GradientAccumulationPlugin, GradientState, KwargsHandler


@pytest.fixture(autouse=True)
def fresh_state():
    GradientState._reset_state()
    yield
    GradientState._reset_state()


class Loader:
    """Stands for a prepared loader: only the attributes GradientState reads."""

    def __init__(self, end: bool, remainder: int) -> None:
        self.end_of_dataloader = end
        self.remainder = remainder


def test_defaults_without_plugin():
    state = GradientState()
    assert state.sync_gradients is True
    assert state.num_steps == 1
    assert state.adjust_scheduler is True
    assert state.sync_with_dataloader is True
    assert state.sync_each_batch is False
    assert state.plugin_kwargs == {}
    assert state.in_dataloader is False
    assert state.active_dataloader is None
    assert state.dataloader_references == [None]
    assert state.end_of_dataloader is False
    assert state.remainder == -1


def test_instances_share_state():
    first = GradientState()
    first._set_sync_gradients(False)
    assert GradientState().sync_gradients is False
    GradientState()._set_sync_gradients(True)
    assert first.sync_gradients is True


def test_plugin_values_and_update():
    plugin = GradientAccumulationPlugin(
        num_steps=4, sync_with_dataloader=False, sync_each_batch=True
    )
    assert plugin.to_kwargs() == {
        "num_steps": 4,
        "sync_with_dataloader": False,
        "sync_each_batch": True,
    }
    assert isinstance(plugin, KwargsHandler)
    state = GradientState(plugin)
    assert (state.num_steps, state.sync_with_dataloader, state.sync_each_batch) == (4, False, True)
    assert state.adjust_scheduler is True
    # A later instance without a plugin keeps the values; one with another plugin replaces them.
    assert GradientState().num_steps == 4
    GradientState(GradientAccumulationPlugin(num_steps=2, adjust_scheduler=False))
    assert (state.num_steps, state.adjust_scheduler, state.sync_with_dataloader) == (2, False, True)
    # The Accelerator sets the step count directly, as Accelerate does.
    state.plugin_kwargs.update({"num_steps": 8})
    assert GradientState().num_steps == 8


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_plugin_rejects_bad_num_steps(bad):
    with pytest.raises(ValueError, match=r"num_steps must be an integer >= 1"):
        GradientAccumulationPlugin(num_steps=bad)


def test_innermost_loader_is_active():
    state = GradientState()
    outer, inner = Loader(False, 3), Loader(True, 7)
    state._add_dataloader(outer)
    assert (state.in_dataloader, state.end_of_dataloader, state.remainder) == (True, False, 3)
    state._add_dataloader(inner)
    assert state.active_dataloader is inner
    assert (state.end_of_dataloader, state.remainder) == (True, 7)
    assert state.dataloader_references == [None, outer, inner]
    state._remove_dataloader(inner)
    assert state.active_dataloader is outer
    state._remove_dataloader(outer)
    assert state.in_dataloader is False
    assert state.remainder == -1


def test_references_are_weak():
    state = GradientState()
    loader = Loader(False, 0)
    state._add_dataloader(loader)
    del loader
    gc.collect()
    assert state.active_dataloader is None
    assert state.in_dataloader is False


def test_reset_state_starts_fresh():
    GradientState(GradientAccumulationPlugin(num_steps=3))._set_sync_gradients(False)
    GradientState._reset_state()
    state = GradientState()
    assert (state.num_steps, state.sync_gradients) == (1, True)


def test_xla_synced_flag_and_fsdp(monkeypatch):
    state = GradientState()
    assert state.is_xla_gradients_synced is False
    state.is_xla_gradients_synced = True
    assert GradientState().is_xla_gradients_synced is True
    state.is_xla_gradients_synced = False
    # The raw environment does not decide it: the XLA strategy sets it.
    monkeypatch.setenv("ACCEL_STRATEGY", "fsdp")
    assert state.is_xla_gradients_synced is False


def test_repr_names_the_values():
    text = repr(GradientState(GradientAccumulationPlugin(num_steps=2)))
    assert "Sync Gradients: True" in text
    assert "{'num_steps': 2}" in text


def test_an_abandoned_iterator_closed_late_leaves_the_next_epoch_active():
    """transformers' Trainer takes each epoch's batches by count and leaves the iterator suspended
    after the last one; the garbage collector may close it while the next epoch runs (at another
    moment on each process). That must not end the live iteration of the same loader."""
    import torch

    from accel_core import Accelerator

    accelerator = Accelerator()
    loader = accelerator.prepare(torch.utils.data.DataLoader(list(range(6)), batch_size=2))
    state = accelerator.gradient_state
    first = iter(loader)
    assert [next(first).tolist() for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert state.end_of_dataloader  # the last batch, the generator still suspended
    second = iter(loader)
    batches = [next(second).tolist(), next(second).tolist()]
    first.close()  # what a late garbage collection does
    assert state.in_dataloader and state.active_dataloader is loader
    assert not state.end_of_dataloader and state.remainder == 0
    batches.append(next(second).tolist())
    assert batches == [[0, 1], [2, 3], [4, 5]] and state.end_of_dataloader
    assert list(second) == [] and not state.in_dataloader
