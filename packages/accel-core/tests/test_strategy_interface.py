"""What the Strategy interface lets a strategy own: joint setup with re-pointed optimizers, the
sampler arguments, the loader, precision and loss scaling, accumulation before GradientState,
clipping given the module, sharded init, collectives, and the questions accel-core asks it."""

from __future__ import annotations

import types
import weakref

import pytest
import torch

from accel_core import Accelerator
from accel_core.gradient_state import GradientAccumulationPlugin
from accel_core.precision import Precision, get_grad_scaler
from accel_core.state import AcceleratorState
from accel_core.strategies import repoint_optimizer
from accel_core.strategies.accumulation_policy import AccumulationPolicy
from accel_core.strategies.compat import AccelerateCompat
from accel_core.strategies.single_device import SingleDeviceStrategy


class _ReplacingStrategy(SingleDeviceStrategy):
    """Replaces every parameter with a new one, as FSDP2's fully_shard does."""

    name = "replacing"

    def setup_module(self, module, *, device_placement):
        for sub in module.modules():
            for key, param in list(sub._parameters.items()):
                if param is not None:
                    sub._parameters[key] = torch.nn.Parameter(param.detach().clone() * 1.0)
        return module


@pytest.mark.parametrize("together", [True, False])
def test_the_optimizer_is_repointed_at_the_parameters_setup_replaced(together):
    accelerator = Accelerator(strategy=_ReplacingStrategy())
    model = torch.nn.Linear(3, 1)
    old = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    if together:
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    else:  # one object per call: the map of replaced parameters is kept between calls
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(optimizer)
        scheduler = accelerator.prepare(scheduler)
    new = list(model.parameters())
    assert all(a is not b for a, b in zip(old, new, strict=True))
    assert optimizer.param_groups[0]["params"] == new
    before = [p.detach().clone() for p in new]
    accelerator.backward(model(torch.ones(2, 3)).sum())
    optimizer.step()
    scheduler.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, new, strict=True))
    assert scheduler.get_last_lr() == pytest.approx([0.05])


def test_repoint_moves_optimizer_state_along():
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.Adam([param], lr=0.1)
    param.grad = torch.ones(2)
    optimizer.step()
    new = torch.nn.Parameter(param.detach().clone())
    assert repoint_optimizer(optimizer, {id(param): (weakref.ref(param), weakref.ref(new))}) == 1
    assert optimizer.param_groups[0]["params"][0] is new
    assert int(optimizer.state[new]["step"]) == 1 and param not in optimizer.state


def test_the_parameter_map_keeps_no_parameter_alive():
    accelerator = Accelerator(strategy=_ReplacingStrategy())
    model = torch.nn.Linear(3, 1)
    original = weakref.ref(model.weight)
    model = accelerator.prepare(model)
    set_up = weakref.ref(model.weight)
    assert original() is None  # only the optimizer would have kept it, and there is none
    accelerator.free_memory()
    del model
    assert set_up() is None


class _HalfShardStrategy(SingleDeviceStrategy):
    """Pretends to be the second of two replicas, and wraps each loader."""

    name = "half"

    @property
    def distributed_sampler_kwargs(self):
        return {"num_replicas": 2, "rank": 1}

    def process_dataloader(self, dataloader):
        dataloader.processed_by = self.name
        return dataloader


def test_loaders_are_sharded_with_the_strategys_sampler_arguments_then_processed():
    accelerator = Accelerator(strategy=_HalfShardStrategy())
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    prepared = accelerator.prepare(loader)
    # rank 1 of 2 reads the second batch of every pair of batches
    assert [b.tolist() for b in prepared] == [[2, 3], [6, 7]]
    assert prepared.processed_by == "half"


class _EngineAccumulation(AccumulationPolicy):
    def configure(self, plugin):
        return GradientAccumulationPlugin(num_steps=4)  # an engine's own config wins


class _RecordingStrategy(SingleDeviceStrategy):
    name = "recording"

    def __init__(self, kwargs_handlers=(), **options):
        super().__init__(kwargs_handlers)
        self.seen = []
        self.accumulation = _EngineAccumulation(self)

    def setup_precision(self, mode, **handlers):
        self._precision = _TimesEight(mode, self.root_device)
        return self._precision

    def backward(self, loss, **kwargs):
        self.seen.append(loss)
        super().backward(loss, **kwargs)

    def clip_gradients_norm(self, module, optimizer, max_norm, norm_type=2.0, *, parameters=None):
        self.seen.append((module, optimizer))
        return super().clip_gradients_norm(
            module, optimizer, max_norm, norm_type, parameters=parameters
        )

    def module_init_context(self, empty_init=None):
        self.seen.append(("init", empty_init))
        return torch.device("meta")

    def gather(self, data):
        self.seen.append("gather")
        return data

    def gather_object(self, obj):
        return [obj]

    def reduce(self, data, reduction="sum", scale=1.0):
        self.seen.append(("reduce", reduction))
        return data * scale

    def broadcast(self, data, from_process=0):
        return data


class _TimesEight(Precision):
    def scale_loss(self, loss):
        return loss * 8


def test_the_strategy_owns_precision_and_scales_the_loss_itself():
    strategy = _RecordingStrategy()
    accelerator = Accelerator(strategy=strategy, gradient_accumulation_steps=1)
    assert accelerator.precision is strategy.precision
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    model = accelerator.prepare(model)
    loss = model(torch.ones(1, 2)).sum()
    accelerator.backward(loss)
    # accumulation steps come from the strategy (4): the loss arrives divided, not scaled
    assert accelerator.gradient_accumulation_steps == 4
    assert float(strategy.seen[0].detach()) == pytest.approx(float(loss.detach()) / 4)
    # the precision scaled it by 8 inside the strategy's backward
    assert model.weight.grad.tolist() == [[2.0, 2.0]]


def test_clipping_is_given_the_module_and_optimizer_of_the_parameters():
    strategy = _RecordingStrategy()
    accelerator = Accelerator(strategy=strategy)
    model = torch.nn.Linear(2, 1)
    other = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, other, optimizer = accelerator.prepare(model, other, optimizer)
    accelerator.backward(model(torch.ones(1, 2)).sum())
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    assert strategy.seen[-1] == (model, optimizer)


def test_init_module_enters_the_strategys_sharded_init():
    strategy = _RecordingStrategy()
    accelerator = Accelerator(strategy=strategy)
    with accelerator.init_module(empty_init=True):
        model = torch.nn.Linear(2, 2)
    assert strategy.seen == [("init", True)]
    assert model.weight.device.type == "meta"


def test_init_module_without_sharded_init_builds_on_the_device_or_meta():
    accelerator = Accelerator(strategy="single_device")
    with accelerator.init_module():
        on_device = torch.nn.Linear(2, 2)
    with accelerator.init_module(empty_init=True):
        empty = torch.nn.Linear(2, 2)
    assert on_device.weight.device == accelerator.device
    assert empty.weight.device.type == "meta"


def test_collectives_go_through_a_strategy_that_has_them():
    strategy = _RecordingStrategy()
    accelerator = Accelerator(strategy=strategy)
    data = torch.arange(3.0)
    assert torch.equal(accelerator.gather(data), data)
    assert torch.equal(accelerator.reduce(data, "mean", scale=2.0), data * 2)
    assert torch.equal(accelerator.gather_for_metrics(data), data)
    assert strategy.seen == ["gather", ("reduce", "mean"), "gather"]


def test_questions_accel_core_asks_the_strategy():
    strategy = _RecordingStrategy()
    accelerator = Accelerator(strategy=strategy)
    assert isinstance(get_grad_scaler(None, "cpu"), torch.amp.GradScaler)
    assert accelerator.multi_device is False
    assert accelerator.device == strategy.root_device


class _FromPlugin(SingleDeviceStrategy):
    name = "from_plugin"

    def __init__(self, kwargs_handlers=(), plugin=None, **options):
        super().__init__(kwargs_handlers)


def test_deepspeed_plugin_is_read_only_when_the_strategy_was_built_from_it(monkeypatch):
    from accel_core.strategies import registry, resolve_strategy

    monkeypatch.setitem(registry._registered, "deepspeed", _FromPlugin)
    plugin = object()
    chosen = resolve_strategy(
        None,
        launch_strategy=None,
        launch_options=None,
        world_size=1,
        plugins={"deepspeed": plugin},
    )
    assert chosen.compat.plugin is plugin  # the resolver records what it was built from
    state = AcceleratorState(_from_accelerator=True)
    state.deepspeed_plugins = plugin
    assert state.deepspeed_plugin is None  # no strategy chosen yet
    state._set_strategy(chosen)
    assert state.deepspeed_plugin is plugin
    state._set_strategy(SingleDeviceStrategy())
    assert state.deepspeed_plugin is None


def test_optional_abilities_are_protocols():
    from accel_core.strategies import SupportsCollectives, SupportsShardedInit

    assert isinstance(_RecordingStrategy(), SupportsCollectives)
    assert isinstance(_RecordingStrategy(), SupportsShardedInit)
    assert not isinstance(SingleDeviceStrategy(), SupportsCollectives)
    assert not isinstance(SingleDeviceStrategy(), SupportsShardedInit)


class _PluginStrategy(SingleDeviceStrategy):
    slot = "fsdp_plugin"

    def __init__(self, plugin: object) -> None:
        super().__init__()
        self.plugin = plugin
        # as accel-backends' fsdp strategy answers Accelerate's is_fsdp2, from its plugin
        version = getattr(plugin, "fsdp_version", None)
        flags = frozenset({"is_fsdp2"}) if version == 2 else frozenset()
        self.compat = AccelerateCompat(plugin=plugin, plugin_slot=self.slot, flags=flags)


def test_a_strategy_chosen_without_a_plugin_shows_its_own_in_the_state_slot():
    plugin = types.SimpleNamespace(fsdp_version=2)
    accelerator = Accelerator(strategy=_PluginStrategy(plugin))
    assert accelerator.state.fsdp_plugin is plugin
    assert accelerator.state.is_fsdp2
    assert accelerator.state.deepspeed_plugins is None


def test_a_plugin_given_to_the_accelerator_is_not_replaced_by_the_strategys():
    given, own = types.SimpleNamespace(fsdp_version=1), types.SimpleNamespace(fsdp_version=2)
    state = AcceleratorState(fsdp_plugin=given)
    state._set_strategy(_PluginStrategy(own))
    assert state.fsdp_plugin is given
    assert not state.is_fsdp2  # the strategy was not built from the given plugin


class _SelectingStrategy(_PluginStrategy):
    slot = "deepspeed_plugins"

    def __init__(self, plugins: dict) -> None:
        super().__init__(plugins["a"])
        self.plugins, self.selected = plugins, []

    def select_plugin(self, name):
        self.selected.append(name)
        self.plugin = self.compat.plugin = self.plugins[name]


def test_select_deepspeed_plugin_asks_the_strategy_and_names_what_exists():
    plugins = {"a": types.SimpleNamespace(), "b": types.SimpleNamespace()}
    strategy = _SelectingStrategy(plugins)
    state = AcceleratorState(deepspeed_plugin=plugins)
    state._set_strategy(strategy)
    state.select_deepspeed_plugin("b")
    assert strategy.selected == ["b"] and strategy.plugin is plugins["b"]
    assert state.get_deepspeed_plugin("a") is plugins["a"]
    with pytest.raises(ValueError, match=r"no DeepSpeed plugin called 'c': the Accelerator has "):
        state.get_deepspeed_plugin("c")


def test_select_deepspeed_plugin_without_plugins_to_choose_from_is_an_error():
    accelerator = Accelerator()
    with pytest.raises(ValueError, match="strategy 'single_device' has no plugins to choose from"):
        accelerator.state.select_deepspeed_plugin("b")
