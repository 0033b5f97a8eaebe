"""Choosing and configuring the deepspeed strategy, in this process and without DeepSpeed: its
options, its plugin, and conflicting settings refused before any process group exists."""

from __future__ import annotations

import json

import pytest
import torch

from accel_backends import (
    DeepSpeedConfigConflict,
    DeepSpeedPlugin,
    DeepSpeedStrategy,
    DummyOptim,
    DummyScheduler,
)
from accel_core.strategies import register_strategy, resolve_strategy


def test_a_setting_given_twice_is_refused_before_any_process_group(tmp_path, monkeypatch):
    config_file = tmp_path / "ds_config.json"
    config_file.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    register_strategy("deepspeed", DeepSpeedStrategy)  # metadata may predate the entry point
    monkeypatch.setenv("ACCEL_STRATEGY", "deepspeed")
    options = {"zero_stage": 2, "deepspeed_config_file": str(config_file)}
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps(options))
    with pytest.raises(DeepSpeedConfigConflict) as error:
        # what the Accelerator does with the launch environment
        resolve_strategy(None, launch_strategy="deepspeed", launch_options=options, world_size=2)
    assert str(error.value) == (
        "DeepSpeed setting zero_optimization.stage is given twice with different values: "
        f"3 from {config_file}: zero_optimization.stage, and 2 from "
        "ACCEL_STRATEGY_CONFIG['zero_stage'] (accel launch). Keep one of them, or make them equal."
    )
    assert not torch.distributed.is_initialized()


def test_options_build_the_plugin_and_a_plugin_is_used_as_given():
    strategy = DeepSpeedStrategy(zero_stage=3, gradient_clipping=0.0)
    assert isinstance(strategy.plugin, DeepSpeedPlugin)
    assert strategy.plugin.deepspeed_config["zero_optimization"]["stage"] == 3
    # 0 is written: without the key DeepSpeed 0.19 clips at 1.0
    assert strategy.plugin.deepspeed_config["gradient_clipping"] == 0.0
    assert "DeepSpeedPlugin(zero_stage=3)" in strategy.describe()
    plugin = DeepSpeedPlugin(zero_stage=1)
    assert DeepSpeedStrategy(plugin=plugin).plugin is plugin
    assert DeepSpeedStrategy(plugin={"only": plugin}).plugin is plugin
    # the engine's accumulation and checkpoint parts (accel-core 0.4.5 moved these off Strategy)
    assert strategy.accumulation.owned_by_engine and strategy.checkpoint_io.supports_async_save


def test_bad_options_are_refused():
    with pytest.raises(TypeError, match=r"options \['zero_stages'\].*valid options: .*zero_stage"):
        DeepSpeedStrategy(zero_stages=2)
    with pytest.raises(TypeError, match="got a plugin and options"):
        DeepSpeedStrategy(plugin=DeepSpeedPlugin(), zero_stage=2)
    with pytest.raises(TypeError, match="needs DeepSpeedPlugin objects, got dict"):
        DeepSpeedStrategy(plugin={"a": {"zero_stage": 2}})
    with pytest.raises(ValueError, match="empty dict"):
        DeepSpeedStrategy(plugin={})


def test_several_plugins_the_first_active_until_another_is_selected():
    first, second = DeepSpeedPlugin(), DeepSpeedPlugin(zero_stage=1)
    strategy = DeepSpeedStrategy(plugin={"a": first, "b": second})
    assert strategy.plugin is first and strategy.plugins == {"a": first, "b": second}
    assert strategy.select_plugin("b") is second
    assert strategy.plugin is second and (first.selected, second.selected) == (False, True)
    with pytest.raises(ValueError, match=r"no DeepSpeed plugin called 'c'.*\['a', 'b'\]"):
        strategy.select_plugin("c")
    assert strategy.plugin is second  # unchanged
    alone = DeepSpeedStrategy(plugin=first)
    assert alone.plugins is None
    with pytest.raises(ValueError, match="one plugin, not named"):
        alone.select_plugin("a")


def test_dummies_are_prepared_as_an_optimizer_and_a_scheduler_but_never_step():
    model = torch.nn.Linear(2, 2)
    optimizer = DummyOptim(model.parameters(), lr=0.01)  # a generator: kept as a list
    assert optimizer.params == list(model.parameters())
    assert isinstance(optimizer, torch.optim.Optimizer)  # how prepare() hands it to the strategy
    assert optimizer.defaults == {"lr": 0.01, "weight_decay": 0}
    scheduler = DummyScheduler(optimizer, total_num_steps=10)
    assert isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)
    assert "initial_lr" not in optimizer.param_groups[0]  # torch's scheduler set-up did not run
    with pytest.raises(RuntimeError, match="DummyOptim stands in for the one of the DeepSpeed"):
        optimizer.step()
    with pytest.raises(RuntimeError, match="DummyScheduler stands in"):
        scheduler.step()
