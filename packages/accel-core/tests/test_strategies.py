"""The Strategy interface, the registry (entry points, lazy factories) and the resolver."""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
from pathlib import Path

import pytest
import torch

import accel_core
from accel_core import Accelerator, DistributedDataParallelKwargs, Strategy
from accel_core.strategies import (
    ENTRY_POINT_GROUP,
    SupportsJoin,
    SupportsNoSync,
    UnknownStrategyError,
    available_strategies,
    create_strategy,
    register_strategy,
    resolve_strategy,
)
from accel_core.strategies.ddp import DDPStrategy
from accel_core.strategies.single_device import SingleDeviceStrategy


def test_built_in_strategies_are_registered_as_entry_points():
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert found["ddp"] == "accel_core.strategies.ddp:DDPStrategy"
    assert found["single_device"] == "accel_core.strategies.single_device:SingleDeviceStrategy"
    assert {"ddp", "single_device"} <= set(available_strategies())


def test_strategy_interface_is_small_and_abilities_are_protocols():
    abstract = sorted(Strategy.__abstractmethods__)
    assert abstract == [
        "backward",
        "clip_gradients_norm",
        "load_model_state_dict",
        "model_state_dict",
        "setup_environment",
        "wrap_model",
        "wrap_optimizer",
    ]
    assert isinstance(DDPStrategy(), SupportsNoSync) and isinstance(DDPStrategy(), SupportsJoin)
    assert not isinstance(SingleDeviceStrategy(), SupportsNoSync)
    assert not isinstance(SingleDeviceStrategy(), SupportsJoin)


def test_unknown_strategy_lists_known_names_and_the_pip_line():
    with pytest.raises(UnknownStrategyError) as error:
        Accelerator(strategy="magic")
    message = str(error.value)
    assert "'magic'" in message and "'ddp'" in message and "'single_device'" in message
    assert "pip install accel-backends[deepspeed]" in message


def test_backend_strategy_not_installed_says_what_to_install(monkeypatch):
    from accel_core.strategies import registry

    monkeypatch.setattr(registry, "installed_version", lambda distribution: None)
    monkeypatch.setenv("ACCEL_STRATEGY", "deepspeed")
    with pytest.raises(UnknownStrategyError, match=r"pip install accel-backends\[deepspeed\]"):
        Accelerator()


def test_backend_installed_without_the_strategy_says_it_is_not_built(monkeypatch):
    from accel_core.strategies import registry

    monkeypatch.setattr(registry, "installed_version", lambda distribution: "0.2.0")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(
        UnknownStrategyError,
        match=r"accel-backends 0.2.0 is installed but does not provide the deepspeed strategy",
    ):
        Accelerator()


def test_resolver_precedence():
    assert resolve_strategy(None, launch_strategy=None, launch_options=None, world_size=1).name == (
        "single_device"
    )
    assert resolve_strategy(None, launch_strategy=None, launch_options=None, world_size=4).name == (
        "ddp"
    )
    chosen = resolve_strategy(
        None, launch_strategy="ddp", launch_options={"bucket_cap_mb": 5}, world_size=1
    )
    assert isinstance(chosen, DDPStrategy) and chosen.ddp_kwargs.bucket_cap_mb == 5
    mine = SingleDeviceStrategy()
    assert resolve_strategy(mine, launch_strategy="ddp", launch_options={}, world_size=2) is mine
    alias = resolve_strategy("multi_gpu", launch_strategy=None, launch_options={}, world_size=1)
    assert alias.name == "ddp"


def test_ddp_options_and_handlers():
    handler = DistributedDataParallelKwargs(find_unused_parameters=True)
    strategy = create_strategy("ddp", kwargs_handlers=[handler])
    assert strategy.ddp_kwargs is handler
    assert strategy.ddp_kwargs.to_kwargs() == {"find_unused_parameters": True}
    with pytest.raises(TypeError, match=r"unknown options \['bucket_size'\].*bucket_cap_mb"):
        create_strategy("ddp", bucket_size=3)
    with pytest.raises(TypeError, match="takes no options"):
        create_strategy("single_device", anything=1)


def test_ddp_without_a_process_group_says_how_to_launch():
    with pytest.raises(RuntimeError, match="accel launch"):
        Accelerator(strategy="ddp")


class _CountingStrategy(SingleDeviceStrategy):
    name = "counting"

    def __init__(self, kwargs_handlers=(), **options):
        super().__init__(kwargs_handlers)
        self.calls = []

    def setup_environment(self, state):
        super().setup_environment(state)
        self.calls.append("setup_environment")

    def wrap_model(self, model, *, device_placement):
        self.calls.append("wrap_model")
        return super().wrap_model(model, device_placement=device_placement)

    def wrap_optimizer(self, optimizer, *, device_placement, scaler):
        self.calls.append("wrap_optimizer")
        return super().wrap_optimizer(optimizer, device_placement=device_placement, scaler=scaler)

    def backward(self, loss, **kwargs):
        self.calls.append("backward")
        super().backward(loss, **kwargs)

    def no_sync(self, model):
        self.calls.append("no_sync")
        return contextlib.nullcontext()


def test_a_registered_strategy_is_used_in_the_documented_order():
    register_strategy("counting", _CountingStrategy)
    accelerator = Accelerator(strategy="counting")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer, model = accelerator.prepare(optimizer, model)
    accelerator.backward(model(torch.ones(1, 2)).sum())
    assert accelerator.strategy.calls == [
        "setup_environment",
        "wrap_model",
        "wrap_optimizer",
        "backward",
    ]


def test_factory_must_return_a_strategy():
    register_strategy("broken", lambda **_: object())
    with pytest.raises(TypeError, match=r"not a accel_core\.Strategy"):
        create_strategy("broken")


def test_accelerator_never_branches_on_the_distribution_type():
    source = (Path(accel_core.__file__).parent / "accelerator.py").read_text()
    assert not re.search(r"distributed_type\s*(==|!=|in\b)", source)
    assert "DistributedType." not in source
    assert len(source.splitlines()) < 550
