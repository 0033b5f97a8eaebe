"""Behaviour that follows Hugging Face Accelerate 1.15, on one process (issue 11).

Expected values were measured by running the same calls under Accelerate 1.15 (its own venv);
each test says what Accelerate gives where that is not obvious from the assertion.
"""

from __future__ import annotations

import inspect
import pickle
from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accel_core import (
    Accelerator,
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
    skip_first_batches,
)
from accel_core.engine_description import EngineDescription
from accel_core.out_of_scope import OutOfScopeError
from accel_core.state import AcceleratorState

# --------------------------------------------------------------------------------------------
# prepare()


def test_prepare_returns_unknown_objects_unchanged_in_place():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    items, options = [1, 2], {"a": 1}
    result = accelerator.prepare(model, None, items, 3, options, "s")
    # Accelerate 1.15: ('Linear', 'NoneType', 'list', 'int', 'dict', 'str'), same objects
    assert isinstance(result, tuple) and len(result) == 6
    assert result[0] is model and result[1] is None and result[2] is items
    assert result[3] == 3 and result[4] is options and result[5] == "s"
    assert accelerator.prepare(None) is None
    assert accelerator.prepare(items) is items
    assert accelerator._models == [model]


def test_prepare_model_twice_lists_the_model_once():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    first = accelerator.prepare_model(model)
    second = accelerator.prepare_model(model)
    again = accelerator.prepare(first)
    assert first is second is again
    assert first._is_accelerate_prepared is True  # Accelerate's marker
    assert len(accelerator._models) == 1


def test_every_prepared_object_carries_accelerates_marker():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    prepared = accelerator.prepare(model, optimizer, scheduler, loader)
    assert [getattr(obj, "_is_accelerate_prepared", None) for obj in prepared] == [True] * 4
    assert not hasattr(optimizer, "_is_accelerate_prepared")  # the user's own objects stay as given
    assert accelerator.prepare(prepared[1]) is prepared[1]


# --------------------------------------------------------------------------------------------
# pickling prepared objects


def _linear(weight: float) -> torch.nn.Linear:
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(weight)
    return model


def test_prepared_optimizer_pickles_and_steps_its_unpickled_model():
    accelerator = Accelerator()
    model = _linear(1.0)
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.5))
    loaded_model, loaded_optimizer = pickle.loads(pickle.dumps((model, optimizer)))
    assert type(loaded_optimizer).__name__ == "AcceleratedOptimizer"
    assert loaded_optimizer.param_groups[0]["lr"] == 0.5
    # the unpickled wrapper follows this process's GradientState, not a copy of it
    assert loaded_optimizer.gradient_state.__dict__ is accelerator.gradient_state.__dict__
    loaded_model(torch.tensor([[2.0]])).sum().backward()  # d/dw (w * 2) = 2
    loaded_optimizer.step()
    loaded_optimizer.zero_grad()
    assert loaded_model.weight.item() == pytest.approx(1.0 - 0.5 * 2.0)
    assert model.weight.item() == 1.0  # the original is untouched
    accelerator.gradient_state._set_sync_gradients(False)  # accumulating: step is skipped
    loaded_model(torch.tensor([[2.0]])).sum().backward()
    loaded_optimizer.step()
    assert loaded_model.weight.item() == pytest.approx(0.0)


class _Stream(IterableDataset):
    def __iter__(self):
        yield from (torch.tensor([float(i)]) for i in range(7))


@pytest.mark.parametrize(
    "config",
    [{}, {"dispatch_batches": True}, {"use_stateful_dataloader": True}],
    ids=["shard", "dispatcher", "stateful"],
)
def test_prepared_data_loaders_pickle_and_iterate(config):
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(**config))
    dataset = TensorDataset(torch.arange(10.0))
    prepared = accelerator.prepare(DataLoader(dataset, batch_size=3))
    expected = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0], [9.0]]
    for loader, batches in ((prepared, expected), (skip_first_batches(prepared, 1), expected[1:])):
        loaded = pickle.loads(pickle.dumps(loader))
        assert type(loaded) is type(loader) and len(loaded) == len(batches)
        ends = []
        seen = []
        for (batch,) in loaded:
            seen.append(batch.tolist())
            ends.append(accelerator.gradient_state.end_of_dataloader)
        assert seen == batches
        # registered with this process's GradientState while iterating
        assert ends == [False] * (len(batches) - 1) + [True]


def test_skip_data_loader_of_an_iterable_dataset_pickles():
    accelerator = Accelerator()
    skipped = skip_first_batches(DataLoader(_Stream(), batch_size=2), 2)
    assert type(skipped).__name__ == "SkipDataLoader"
    loaded = pickle.loads(pickle.dumps(skipped))
    assert [b.flatten().tolist() for b in loaded] == [[4.0, 5.0], [6.0]]
    assert loaded.gradient_state.__dict__ is accelerator.gradient_state.__dict__


# --------------------------------------------------------------------------------------------
# constructor keywords


ACCELERATE_1_15_PARAMETERS = [
    "device_placement", "split_batches", "mixed_precision", "gradient_accumulation_steps", "cpu",
    "dataloader_config", "deepspeed_plugin", "fsdp_plugin", "torch_tp_plugin",
    "megatron_lm_plugin", "rng_types", "log_with", "project_dir", "project_config",
    "gradient_accumulation_plugin", "step_scheduler_with_optimizer", "kwargs_handlers",
    "dynamo_backend", "dynamo_plugin", "deepspeed_plugins", "parallelism_config",
]  # fmt: skip


def test_constructor_takes_accelerate_keywords_in_accelerate_order():
    parameters = list(inspect.signature(Accelerator.__init__).parameters)[1:]
    assert parameters[: len(ACCELERATE_1_15_PARAMETERS)] == ACCELERATE_1_15_PARAMETERS
    assert parameters[len(ACCELERATE_1_15_PARAMETERS) :] == ["strategy"]
    strategy = inspect.signature(Accelerator.__init__).parameters["strategy"]
    assert strategy.kind is inspect.Parameter.KEYWORD_ONLY


class _Plugin:
    """Stands for a DeepSpeedPlugin / FullyShardedDataParallelPlugin (accel-backends)."""


def _with_plugin_engines(monkeypatch, *descriptions) -> None:
    """The engines whose descriptions claim plugin keywords are exactly ``descriptions``,
    whatever accel-backends provides in this environment."""
    from accel_core import engine_options
    from accel_core.built_in_engines import BUILT_IN

    found = {**BUILT_IN, **{d.name: d for d in descriptions}}
    monkeypatch.setattr(engine_options, "strategy_descriptions", lambda: found)


#: How the engines of accel-backends claim Accelerate's plugin keywords (their descriptions).
_DEEPSPEED = EngineDescription(
    name="deepspeed",
    title="DeepSpeed",
    strategy="accel_core.strategies.single_device:SingleDeviceStrategy",
    install="accel-backends[deepspeed]",
    plugin_keywords=("deepspeed_plugin", "deepspeed_plugins"),
)
_FSDP = EngineDescription(
    name="fsdp",
    title="FSDP",
    strategy="accel_core.strategies.single_device:SingleDeviceStrategy",
    install="accel-backends",
    plugin_keywords=("fsdp_plugin",),
)


@pytest.mark.parametrize("keyword", ["deepspeed_plugin", "deepspeed_plugins", "fsdp_plugin"])
def test_a_strategy_plugin_without_its_strategy_says_what_to_install(keyword, monkeypatch):
    from accel_core import engine_options
    from accel_core.built_in_engines import ENGINE_HINT

    # Only the built-in strategies, whatever accel-backends provides in this environment.
    _with_plugin_engines(monkeypatch)
    monkeypatch.setattr(engine_options, "available_strategies", lambda: ["ddp", "single_device"])
    with pytest.raises(NotImplementedError) as error:
        Accelerator(**{keyword: _Plugin()})
    message = str(error.value)
    assert f"no installed strategy takes {keyword}" in message and "'single_device'" in message
    assert ENGINE_HINT in message and "pip install accel-backends" in message
    assert not AcceleratorState._shared_state  # refused before the process state was built


def test_a_strategy_plugin_chooses_its_registered_strategy(monkeypatch):
    from accel_core.strategies import registry
    from accel_core.strategies.single_device import SingleDeviceStrategy

    received = {}

    class FakeDeepSpeed(SingleDeviceStrategy):
        name = "deepspeed"

        def __init__(self, kwargs_handlers=(), plugin=None):
            super().__init__(kwargs_handlers)
            received["plugin"] = plugin

    _with_plugin_engines(monkeypatch, _DEEPSPEED)
    monkeypatch.setitem(registry._registered, "deepspeed", FakeDeepSpeed)
    plugins = {"a": _Plugin(), "b": _Plugin()}
    accelerator = Accelerator(deepspeed_plugins=plugins)
    assert accelerator.strategy.name == "deepspeed" and received["plugin"] is plugins
    assert accelerator.state.deepspeed_plugins is plugins


def test_two_deepspeed_spellings_or_two_engines_are_refused(monkeypatch):
    _with_plugin_engines(monkeypatch, _DEEPSPEED, _FSDP)
    with pytest.raises(ValueError, match="deepspeed_plugin and deepspeed_plugins"):
        Accelerator(deepspeed_plugin=_Plugin(), deepspeed_plugins=_Plugin())
    with pytest.raises(ValueError, match="DeepSpeed plugin and an FSDP plugin"):
        Accelerator(deepspeed_plugin=_Plugin(), fsdp_plugin=_Plugin())


@pytest.mark.parametrize(
    ("kwargs", "feature"),
    [
        ({"megatron_lm_plugin": _Plugin()}, "Megatron-LM (megatron_lm_plugin)"),
        ({"mixed_precision": "fp8"}, 'FP8 training (mixed_precision="fp8")'),
    ],
)
def test_out_of_scope_keywords_name_the_feature(kwargs, feature):
    with pytest.raises(OutOfScopeError, match="is out of scope in accel") as error:
        Accelerator(**kwargs)
    assert str(error.value).startswith(feature)
    assert isinstance(error.value, NotImplementedError)
    assert not AcceleratorState._shared_state


def test_a_parallelism_config_asked_for_comes_from_an_installed_engine(monkeypatch):
    # Accelerate reads torch_tp_plugin as ParallelismConfig(tp_size=...), and builds one when
    # the launch says so; the class is accel-backends': without an engine providing it, say so
    from accel_base import engine_description

    monkeypatch.setattr(engine_description, "installed_engines", dict)
    deprecated = pytest.warns(FutureWarning, match="TorchTensorParallelPlugin` is deprecated")
    with deprecated, pytest.raises(ImportError, match="pip install accel-backends"):
        Accelerator(torch_tp_plugin=_Plugin())
    assert not AcceleratorState._shared_state
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    with pytest.raises(ImportError, match="ACCELERATE_USE_PARALLELISM_CONFIG=true asks for"):
        Accelerator()
    assert not AcceleratorState._shared_state


def test_fp8_recipe_handlers_are_refused_as_out_of_scope():
    from accel_core.fp8_recipes import AORecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs

    for handler in (AORecipeKwargs(), TERecipeKwargs(), MSAMPRecipeKwargs()):
        with pytest.raises(OutOfScopeError, match=r"FP8 training .* out of scope"):
            Accelerator(kwargs_handlers=[handler])


@dataclass
class _ParallelismConfig:
    """The fields of Accelerate's ParallelismConfig (the class itself lives in accel-backends)."""

    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    tp_size: int = 1
    cp_size: int = 1
    sp_size: int = 1
    device_mesh: object = None


@pytest.mark.parametrize(
    ("sizes", "error", "text"),
    [
        # every dimension counts towards the world size (Accelerate's check)
        (
            {"tp_size": 2},
            ValueError,
            r"^ParallelismConfig total_size \(2\) does not match num_processes \(1\): "
            r"dp_replicate_size=1 x dp_shard_size=1 x tp_size=2 must equal the world size 1",
        ),
        ({"cp_size": 2}, ValueError, r"x cp_size=2 must equal the world size 1"),
        ({"sp_size": 4}, ValueError, r"total_size \(4\) does not match"),
        # sizes whose product is not the world size (1 here): Accelerate's message, with the
        # sizes; raised before the strategy is chosen (FSDP2, for dp_shard_size > 1)
        (
            {"dp_shard_size": 2},
            ValueError,
            r"^ParallelismConfig total_size \(2\) does not match num_processes \(1\): "
            r"dp_replicate_size=1 x dp_shard_size=2 must equal the world size 1",
        ),
        ({"dp_replicate_size": 3}, ValueError, r"total_size \(3\) does not match num_processes"),
    ],
)
def test_parallelism_config_beyond_data_parallelism_is_refused(sizes, error, text):
    with pytest.raises(error, match=text):
        Accelerator(parallelism_config=_ParallelismConfig(**sizes))
    assert AcceleratorState().strategy is None  # refused before any strategy was chosen


def test_a_sharding_config_chooses_the_sharding_strategy_and_refuses_others(monkeypatch):
    from accel_core.built_in_engines import BUILT_IN, ENGINE_HINT
    from accel_core.parallelism import check_strategy
    from accel_core.strategies import UnknownStrategyError, create_strategy, resolver
    from accel_core.strategies.resolver import default_strategy_name

    # the installed engine that shards by default (accel-backends' fsdp), here a stand-in
    sharding = EngineDescription(
        name="sharding",
        title="Sharding",
        strategy="accel_core.strategies.single_device:SingleDeviceStrategy",
        install="sharding-engine",
        shards_by_default=True,
    )
    monkeypatch.setattr(
        resolver, "strategy_descriptions", lambda: {**BUILT_IN, "sharding": sharding}
    )
    assert default_strategy_name(2, sharded=True) == "sharding"
    assert default_strategy_name(2) == "ddp"
    monkeypatch.setattr(resolver, "strategy_descriptions", lambda: dict(BUILT_IN))
    with pytest.raises(
        UnknownStrategyError, match="no installed strategy shards by default"
    ) as error:
        default_strategy_name(2, sharded=True)
    assert ENGINE_HINT in str(error.value)  # the fsdp strategy: pip install accel-backends
    ddp = create_strategy("ddp")
    check_strategy(_ParallelismConfig(dp_replicate_size=2), ddp)  # replicas: ddp's own mesh
    message = (
        r"^ParallelismConfig\(dp_replicate_size=2, dp_shard_size=2\) shards the model over the "
        r"device mesh, which strategy 'ddp' does not do"
    )
    with pytest.raises(ValueError, match=message):
        check_strategy(_ParallelismConfig(dp_replicate_size=2, dp_shard_size=2), ddp)


def test_parallelism_config_of_size_one_and_the_rank_properties():
    accelerator = Accelerator(parallelism_config=_ParallelismConfig())
    assert accelerator.parallelism_config == _ParallelismConfig()
    assert accelerator.torch_device_mesh is None  # Accelerate 1.15 on one CPU process: None
    assert accelerator.should_save_model is True
    assert accelerator.tensor_parallel_rank == 0
    assert accelerator.data_parallel_rank == 0
    assert accelerator.data_parallel_shard_rank == 0
    # Accelerate raises NotImplementedError for these two, with or without a configuration
    for name in ("pipeline_parallel_rank", "context_parallel_rank"):
        with pytest.raises(NotImplementedError, match="out of scope"):
            getattr(accelerator, name)


def test_rank_properties_without_parallelism_config_raise_runtime_error():
    accelerator = Accelerator()
    # Accelerate 1.15: RuntimeError "... is not configured. Set `parallelism_config` first."
    for name, what in (
        ("tensor_parallel_rank", "Tensor parallelism"),
        ("data_parallel_rank", "Data parallelism"),
        ("data_parallel_shard_rank", "Shard-based data parallelism"),
    ):
        with pytest.raises(RuntimeError, match=f"^{what} is not configured"):
            getattr(accelerator, name)
    assert accelerator.parallelism_config is None and accelerator.torch_device_mesh is None
    assert accelerator.should_save_model is True  # the local main process


# --------------------------------------------------------------------------------------------
# members Accelerate has


def test_accelerate_members_read_back_as_in_accelerate():
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    accelerator = Accelerator(dataloader_config=config)
    # Accelerate 1.15 on one CPU process
    assert accelerator.multi_device is False
    assert accelerator.is_fsdp2 is False and accelerator.is_composable_parallelism_enabled is False
    assert accelerator.use_stateful_dataloader is True
    assert accelerator.deepspeed_plugin is None and accelerator.state.deepspeed_plugin is None
    assert accelerator.state.is_fsdp2 is False and accelerator.state.device_mesh is None
    assert accelerator.state.torch_tp_plugin is None
    assert accelerator.state.parallelism_config is None
    assert accelerator.save_iteration == 0
    assert accelerator.flag_tensor is None and accelerator.has_lomo_optimizer is False
    fp8 = (accelerator.fp8_enabled, accelerator.has_fp8_handler, accelerator.delayed_fp8_autocast)
    assert fp8 == (False, False, False)
    assert accelerator.fp8_backend == "NO"  # FP8BackendType.NO
    for name in ("fp8_recipe_handler", "ao_recipe_handler", "te_recipe_handler"):
        assert getattr(accelerator, name) is None
    loader = DataLoader(TensorDataset(torch.arange(4.0)))
    assert accelerator.deepspeed_ulysses_dl_adapter(loader, torch.nn.Linear(1, 1)) is loader
    with accelerator.maybe_context_parallel(buffers=[torch.zeros(2)], buffer_seq_dims=[0]):
        ran = True
    assert ran


def test_handler_attributes_hold_the_handlers_given():
    handlers = [
        DistributedDataParallelKwargs(find_unused_parameters=True),
        GradScalerKwargs(init_scale=8.0),
        InitProcessGroupKwargs(),
        AutocastKwargs(enabled=False),
        ProfileKwargs(record_shapes=True),
    ]
    accelerator = Accelerator(kwargs_handlers=handlers)
    found = [
        accelerator.ddp_handler,
        accelerator.scaler_handler,
        accelerator.init_handler,
        accelerator.autocast_handler,
        accelerator.profile_handler,
    ]
    assert all(a is b for a, b in zip(found, handlers, strict=True))
    AcceleratorState._reset_state(reset_partial_state=True)
    bare = Accelerator()
    assert (bare.ddp_handler, bare.scaler_handler, bare.profile_handler) == (None, None, None)


def test_triggers_on_one_process():
    accelerator = Accelerator()
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.flag_tensor.item() == 1
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False  # reset by the True answer
    model = torch.nn.Linear(1, 1)
    with accelerator.trigger_sync_in_backward(model):  # not DDP: the block runs as is
        model(torch.ones(1, 1)).sum().backward()
    assert model.weight.grad is not None


class _FakeLomo(torch.optim.SGD):
    """An optimizer with LOMO's fused backward-and-update (lomo-optim is not installed)."""

    def fused_backward(self, loss, lr):
        loss.backward()
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p -= lr * p.grad


def test_lomo_backward_runs_the_fused_update():
    accelerator = Accelerator()
    model = _linear(1.0)
    accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    with pytest.raises(ValueError, match="found no LOMO optimizer"):
        accelerator.lomo_backward(model(torch.ones(1, 1)).sum(), 0.1)
    accelerator.prepare(_FakeLomo(model.parameters(), lr=1.0))
    assert accelerator.has_lomo_optimizer is True
    model.weight.grad = None
    accelerator.backward(model(torch.tensor([[3.0]])).sum(), learning_rate=0.1)
    assert model.weight.item() == pytest.approx(1.0 - 0.1 * 3.0)


# --------------------------------------------------------------------------------------------
# TorchDynamoPlugin

_DYNAMO_VARIABLES = ("BACKEND", "MODE", "USE_FULLGRAPH", "USE_DYNAMIC", "USE_REGIONAL_COMPILATION")


@pytest.fixture
def no_dynamo_environment(monkeypatch):
    for name in _DYNAMO_VARIABLES:
        monkeypatch.delenv(f"ACCEL_DYNAMO_{name}", raising=False)
        monkeypatch.delenv(f"ACCELERATE_DYNAMO_{name}", raising=False)
    return monkeypatch


def _fields(plugin) -> tuple:
    return (plugin.backend, plugin.mode, plugin.fullgraph, plugin.dynamic, plugin.options,
            plugin.disable, plugin.use_regional_compilation)  # fmt: skip


def test_dynamo_plugin_defaults_and_kwargs_match_accelerate(no_dynamo_environment):
    from accel_core import TorchDynamoPlugin
    from accel_ops import DynamoBackend

    default = TorchDynamoPlugin()
    # Accelerate 1.15: TorchDynamoPlugin(backend=<DynamoBackend.NO: 'NO'>, mode='default',
    # fullgraph=False, dynamic=None, options=None, disable=False, use_regional_compilation=False)
    assert _fields(default) == (DynamoBackend.NO, "default", False, None, None, False, False)
    assert default.to_kwargs() == {} and not default.enabled
    assert default.to_dict() == {
        "backend": "no", "mode": "default", "fullgraph": False, "dynamic": None,
        "options": None, "disable": False, "use_regional_compilation": False,
    }  # fmt: skip
    inductor = TorchDynamoPlugin(backend="inductor")
    assert inductor.backend is DynamoBackend.INDUCTOR and inductor.enabled
    assert inductor.to_kwargs() == {"backend": "inductor"}
    full = TorchDynamoPlugin(
        backend="inductor", mode="max-autotune", fullgraph=True, dynamic=False,
        options={"a": 1}, use_regional_compilation=True,
    )  # fmt: skip
    assert full.to_kwargs() == {
        "backend": "inductor", "mode": "max-autotune", "fullgraph": True, "dynamic": False,
        "options": {"a": 1},
    }  # fmt: skip
    eager = TorchDynamoPlugin(backend=DynamoBackend.EAGER, mode="default", dynamic=True)
    assert eager.to_kwargs() == {"backend": "eager", "dynamic": True}


def test_dynamo_plugin_reads_accelerate_variables_and_ours_win(no_dynamo_environment):
    from accel_core import TorchDynamoPlugin
    from accel_ops import DynamoBackend

    env = no_dynamo_environment
    env.setenv("ACCELERATE_DYNAMO_BACKEND", "EAGER")
    env.setenv("ACCELERATE_DYNAMO_MODE", "reduce-overhead")
    env.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "true")
    env.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "1")
    env.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "yes")
    plugin = TorchDynamoPlugin()
    # Accelerate 1.15 in the same environment
    expected = (DynamoBackend.EAGER, "reduce-overhead", True, True, None, False, True)
    assert _fields(plugin) == expected
    assert plugin.to_kwargs() == {
        "backend": "eager", "mode": "reduce-overhead", "fullgraph": True, "dynamic": True,
    }  # fmt: skip
    env.setenv("ACCEL_DYNAMO_BACKEND", "inductor")
    env.setenv("ACCEL_DYNAMO_USE_DYNAMIC", "false")
    ours = TorchDynamoPlugin()
    assert (ours.backend, ours.dynamic, ours.mode) == (
        DynamoBackend.INDUCTOR, False, "reduce-overhead",
    )  # fmt: skip


def test_accelerator_dynamo_plugin_reads_back_as_accelerate(no_dynamo_environment):
    from accel_core import TorchDynamoPlugin
    from accel_ops import DynamoBackend

    accelerator = Accelerator(dynamo_backend="eager")
    plugin = accelerator.state.dynamo_plugin
    assert _fields(plugin) == (DynamoBackend.EAGER, "default", False, None, None, False, False)
    assert plugin.to_kwargs() == {"backend": "eager"}
    AcceleratorState._reset_state(reset_partial_state=True)
    assert Accelerator().state.dynamo_plugin.to_kwargs() == {}
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.raises(ValueError, match="dynamo_plugin and dynamo_backend were both given"):
        Accelerator(dynamo_backend="eager", dynamo_plugin=TorchDynamoPlugin())


class _Blocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(2))
        self.head = torch.nn.Linear(2, 1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.mark.slow
def test_regional_compilation_compiles_each_block(no_dynamo_environment):
    from accel_core import TorchDynamoPlugin
    from accel_core.regional_compilation import has_compiled_regions

    plugin = TorchDynamoPlugin(backend="eager", use_regional_compilation=True)
    accelerator = Accelerator(dynamo_plugin=plugin)
    model = _Blocks()
    prepared = accelerator.prepare(model)
    assert prepared is not model and has_compiled_regions(prepared)
    x = torch.randn(3, 2)
    assert torch.allclose(prepared(x), model(x))


def test_deep_copy_of_the_accelerator_is_itself():
    import copy

    accelerator = Accelerator()
    holder = {"accelerator": accelerator, "weights": [1.0]}
    copied = copy.deepcopy(holder)
    assert copied["accelerator"] is accelerator  # Accelerate 1.15: the same object
    assert copied["weights"] is not holder["weights"]


def test_a_reset_state_is_named_in_accelerate_words():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    AcceleratorState._reset_state(reset_partial_state=True)
    # Accelerate 1.15's test_script.py matches these two phrases after _reset_state().
    with pytest.raises(AttributeError) as error:
        accelerator.prepare(model)
    message = str(error.value)
    assert "`AcceleratorState` object has no attribute" in message
    assert "This happens if `AcceleratorState._reset_state()`" in message


def test_an_accelerator_after_partial_state_reset_joins_again_as_in_accelerate():
    from accel_ops import PartialState

    first = Accelerator()
    PartialState._reset_state()  # what third-party test suites do between tests
    second = Accelerator()
    assert (second.num_processes, second.process_index, second.device) == (1, 0, first.device)
    assert PartialState().initialized and second.state.initialized


@pytest.mark.parametrize(
    ("device_map", "refused"),
    [
        ({"": "cpu"}, ["cpu"]),  # no bitsandbytes multi-backend here
        ({"0": 0, "1": "disk"}, ["disk"]),
        ({"0": 0}, None),
    ],
)
def test_a_quantized_model_with_cpu_or_disk_entries_is_refused_as_in_accelerate(
    device_map, refused
):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model.is_loaded_in_8bit = True
    model.hf_device_map = device_map
    accelerator = Accelerator()
    if refused is None:
        accelerator.prepare(model)
        return
    with pytest.raises(
        ValueError,
        match=r"^You can't train a model that has been loaded in 8-bit or 4-bit precision with CPU"
        rf" or disk offload: its hf_device_map sends blocks to \['{refused[0]}'\]",
    ):
        accelerator.prepare(model)
    assert accelerator._models == []


def test_a_quantized_model_on_several_devices_is_refused_with_several_processes():
    from accel_core.quantized_placement import check_quantized_placement

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model.is_loaded_in_4bit = True
    model.hf_device_map = {"0": 0, "1": 1}
    check_quantized_placement(model, 1)  # one process may use several GPUs
    with pytest.raises(ValueError, match=r"^You can't train a model .* in any distributed mode"):
        check_quantized_placement(model, 2)
