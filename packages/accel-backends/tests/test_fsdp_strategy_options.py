"""Creating the fsdp strategy (one process, no process group): options, defaults, refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin
from accel_core.strategies import create_strategy, register_strategy, resolve_strategy
from accel_core.strategies.registry import _registered


@pytest.fixture
def registered_fsdp():
    register_strategy("fsdp", FSDPStrategy)
    yield
    _registered.pop("fsdp", None)


def test_without_a_plugin_it_builds_one_of_version_2():
    strategy = FSDPStrategy()
    assert isinstance(strategy.plugin, FullyShardedDataParallelPlugin)
    assert strategy.plugin.fsdp_version == 2
    assert strategy.name == "fsdp" and strategy.compat.replicates_model is False
    assert strategy.checkpoint_io.supports_async_save is True


def test_plugin_fields_are_options():
    strategy = FSDPStrategy(reshard_after_forward=False, state_dict_type="FULL_STATE_DICT")
    assert strategy.plugin.reshard_after_forward is False
    assert str(strategy.plugin.state_dict_type) == "StateDictType.FULL_STATE_DICT"


def test_a_given_plugin_is_used_as_is():
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    assert FSDPStrategy(plugin=plugin).plugin is plugin
    with pytest.raises(TypeError, match="got a plugin and options"):
        FSDPStrategy(plugin=plugin, reshard_after_forward=False)
    with pytest.raises(TypeError, match="needs a FullyShardedDataParallelPlugin"):
        FSDPStrategy(plugin=object())  # type: ignore[arg-type]


def test_fsdp_version_1_is_taken_from_the_plugin_or_the_options():
    assert FSDPStrategy(plugin=FullyShardedDataParallelPlugin()).fsdp1  # Accelerate's default: 1
    assert FSDPStrategy(fsdp_version=1).fsdp1
    assert not FSDPStrategy().fsdp1  # the strategy's own default is FSDP2


def test_the_strategy_answers_accelerates_is_fsdp2_from_its_plugin():
    # AcceleratorState.is_fsdp2 reads this answer; accel-core reads no FSDP plugin field
    assert FSDPStrategy().compat.flags == frozenset({"is_fsdp2"})
    assert FSDPStrategy(plugin=FullyShardedDataParallelPlugin(fsdp_version=2)).compat.flags == {
        "is_fsdp2"
    }
    assert FSDPStrategy(fsdp_version=1).compat.flags == frozenset()


def test_local_state_dicts_are_refused_naming_the_setting_to_use():
    plugin = FullyShardedDataParallelPlugin(fsdp_version=1, state_dict_type="LOCAL_STATE_DICT")
    with pytest.raises(ValueError, match=r"LOCAL_STATE_DICT is not supported.*SHARDED_STATE_DICT"):
        FSDPStrategy(plugin=plugin)


def test_an_unknown_option_names_the_valid_ones():
    with pytest.raises(TypeError, match=r"\['fsdp_offload_params'\].*valid options: .*cpu_offload"):
        FSDPStrategy(fsdp_offload_params=True)  # a launch key, not from the launch


def test_launch_keys_from_accel_strategy_config_are_read_by_the_plugin(monkeypatch):
    config = {"fsdp_version": 2, "fsdp_reshard_after_forward": False}
    monkeypatch.setenv("ACCEL_STRATEGY", "fsdp")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps(config))
    strategy = FSDPStrategy(**config)  # what the resolver passes under ACCEL_STRATEGY=fsdp
    assert strategy.plugin.reshard_after_forward is False


def test_the_launch_can_choose_version_1(monkeypatch):
    monkeypatch.setenv("ACCEL_STRATEGY", "fsdp")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps({"fsdp_version": 1}))
    assert FSDPStrategy(fsdp_version=1).plugin.fsdp_version == 1


def test_the_resolver_picks_it_from_the_plugin_and_from_the_name(registered_fsdp):
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    chosen = resolve_strategy(
        None, launch_strategy=None, launch_options=None, world_size=2, plugins={"fsdp": plugin}
    )
    assert isinstance(chosen, FSDPStrategy) and chosen.plugin is plugin
    by_name = resolve_strategy(
        None,
        launch_strategy="fsdp",
        launch_options={"reshard_after_forward": False},
        world_size=2,
    )
    assert isinstance(by_name, FSDPStrategy) and by_name.plugin.reshard_after_forward is False
    assert isinstance(create_strategy("FSDP"), FSDPStrategy)


def test_several_processes_need_the_launch_to_form_the_process_group():
    state = SimpleNamespace(num_processes=2, device=torch.device("cpu"))
    with pytest.raises(RuntimeError, match="strategy 'fsdp' needs a process group"):
        FSDPStrategy().setup_environment(state)  # type: ignore[arg-type]


def test_one_process_gets_a_group_of_its_own_until_teardown():
    strategy = FSDPStrategy()
    state = SimpleNamespace(
        num_processes=1, device=torch.device("cpu"), parallelism_config=None, device_mesh=None
    )
    strategy.setup_environment(state)  # type: ignore[arg-type]
    try:
        assert torch.distributed.is_initialized()
        assert torch.distributed.get_world_size() == 1 and torch.distributed.get_backend() == "gloo"
        assert strategy.mesh is not None and strategy.mesh.size() == 1
    finally:
        strategy.teardown()
    assert not torch.distributed.is_initialized()
