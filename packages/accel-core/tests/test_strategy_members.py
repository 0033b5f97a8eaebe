"""The ``Strategy`` base stays narrow: its public members are counted and named here, so that
one more is a visible change (issue 34: a core, plus parts the engine returns)."""

from __future__ import annotations

import inspect

import pytest

from accel_core.strategies import Strategy
from accel_core.strategies.accumulation_policy import AccumulationPolicy
from accel_core.strategies.base import MOVED_MEMBERS
from accel_core.strategies.checkpoint_io import CheckpointIO
from accel_core.strategies.compat import AccelerateCompat
from accel_core.strategies.single_device import SingleDeviceStrategy

CORE = {
    # name and environment
    "name",
    "setup_environment",
    "root_device",
    "distributed_sampler_kwargs",
    "data_parallel_group",
    # precision (the part with the scaler)
    "setup_precision",
    "precision",
    # setup of module, optimizer and loaders
    "setup",
    "setup_module",
    "setup_optimizer",
    "process_dataloader",
    # the step
    "backward",
    "forward_backward",
    "optimizer_step",
    "clip_gradients_norm",
    "clip_gradients_value",
    "teardown",
    # the parts an engine returns
    "checkpoint_io",
    "accumulation",
    "compat",
}


def _public_members(cls: type) -> set[str]:
    annotated = set(getattr(cls, "__annotations__", {}))
    return {name for name in set(vars(cls)) | annotated if not name.startswith("_")}


def test_the_base_has_at_most_twenty_public_members_and_these_are_they():
    members = _public_members(Strategy)
    assert members == CORE
    assert len(members) <= 20


def test_no_moved_member_is_back_on_the_base():
    assert not set(MOVED_MEMBERS) & _public_members(Strategy)


def test_the_parts_have_defaults():
    strategy = SingleDeviceStrategy()
    assert type(strategy.checkpoint_io) is CheckpointIO
    assert strategy.checkpoint_io.strategy is strategy
    assert type(strategy.accumulation) is AccumulationPolicy
    assert strategy.accumulation.owned_by_engine is False
    assert isinstance(strategy.compat, AccelerateCompat)
    assert strategy.compat.replicates_model is True  # one process holds the whole model
    assert strategy.checkpoint_io is strategy.checkpoint_io  # made once, then kept


@pytest.mark.parametrize("member", ["checkpoint_model_states", "handles_accumulation", "plugin"])
def test_a_subclass_defining_a_moved_member_is_told_where_it_went(member):
    body = {member: (lambda self: None) if member != "handles_accumulation" else True}
    with pytest.raises(TypeError, match=rf"defines {member}, which Strategy no longer has.*->"):
        type("Old", (SingleDeviceStrategy,), body)


def test_the_abstract_members_are_three():
    abstract = {
        name
        for name, value in inspect.getmembers(Strategy)
        if getattr(value, "__isabstractmethod__", False)
    }
    assert abstract == {"setup_environment", "root_device", "setup_module"}
