"""HfDeepSpeedConfig, the dummy optimizer and scheduler, the engine wrappers, the plugin lookup."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from accel_backends import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    DeepSpeedPlugin,
    DeepSpeedSchedulerWrapper,
    DummyOptim,
    DummyScheduler,
    EngineNotInstalledError,
    HfDeepSpeedConfig,
    get_active_deepspeed_plugin,
    map_pytorch_optim_to_deepspeed,
)
from accel_ops import DistributedType

NO_DEEPSPEED = importlib.util.find_spec("deepspeed") is None


def test_config_queries_and_edits():
    config = HfDeepSpeedConfig(
        {
            "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}},
            "fp16": {"enabled": False},
        }
    )
    assert config.is_zero3() and not config.is_zero2() and config.is_offload()
    assert config.get_value("zero_optimization.offload_param.device") == "nvme"
    assert config.get_value("zero_optimization.missing.key", "default") == "default"
    assert config.is_false("fp16.enabled") and not config.is_true("fp16.enabled")
    assert not config.is_true("bf16.enabled") and not config.is_false("bf16.enabled")  # unset
    config.del_config_sub_tree("zero_optimization.offload_param")
    config.set_stage_and_offload()
    assert not config.is_offload()
    assert config.config["zero_optimization"] == {"stage": 3}
    config.del_config_sub_tree("scheduler")  # absent: nothing to do
    with pytest.raises(ValueError, match="Can't find scheduler"):
        config.del_config_sub_tree("scheduler", must_exist=True)


def test_offload_counts_only_for_zero_2_and_3():
    stage1 = HfDeepSpeedConfig(
        {"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}
    )
    assert not stage1.is_offload()
    assert HfDeepSpeedConfig({"train_batch_size": 1}).get_value("zero_optimization.stage") is None


def test_dummies_hold_what_deepspeed_needs():
    params = [torch.nn.Parameter(torch.ones(2))]
    optimizer = DummyOptim(params, lr=0.01, weight_decay=0.1, betas=(0.9, 0.99))
    assert (optimizer.params, optimizer.lr, optimizer.weight_decay) == (params, 0.01, 0.1)
    assert optimizer.kwargs == {"betas": (0.9, 0.99)}
    assert (DummyOptim(params).lr, DummyOptim(params).weight_decay) == (0.001, 0)
    scheduler = DummyScheduler(optimizer, total_num_steps=100, warmup_num_steps=10, decay=0.5)
    assert (scheduler.optimizer, scheduler.total_num_steps, scheduler.warmup_num_steps) == (
        optimizer,
        100,
        10,
    )
    assert scheduler.lr_scheduler_callable is None and scheduler.kwargs == {"decay": 0.5}


@pytest.mark.skipif(not NO_DEEPSPEED, reason="checks the error without DeepSpeed")
def test_engine_wrappers_need_deepspeed():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    pip = r"pip install 'accel-backends\[deepspeed\]'"
    with pytest.raises(EngineNotInstalledError, match=f"DeepSpeedEngineWrapper needs.*{pip}"):
        DeepSpeedEngineWrapper(SimpleNamespace())
    with pytest.raises(EngineNotInstalledError, match="DeepSpeedOptimizerWrapper"):
        DeepSpeedOptimizerWrapper(optimizer)
    with pytest.raises(EngineNotInstalledError, match="DeepSpeedSchedulerWrapper"):
        DeepSpeedSchedulerWrapper(scheduler, optimizer)
    with pytest.raises(EngineNotInstalledError, match="map_pytorch_optim_to_deepspeed"):
        map_pytorch_optim_to_deepspeed(optimizer)


def test_active_plugin_without_deepspeed_is_an_error():
    state = SimpleNamespace(distributed_type=DistributedType.MULTI_CPU)
    with pytest.raises(ValueError, match="Couldn't retrieve the active `DeepSpeedPlugin`"):
        get_active_deepspeed_plugin(state)


def test_active_plugin_is_the_selected_one():
    first, second = DeepSpeedPlugin(), DeepSpeedPlugin(zero_stage=3)
    second._set_selected(True)
    state = SimpleNamespace(
        distributed_type=DistributedType.DEEPSPEED,
        deepspeed_plugins={"first": first, "second": second},
    )
    assert get_active_deepspeed_plugin(state) is second
    single = SimpleNamespace(distributed_type=DistributedType.DEEPSPEED, deepspeed_plugins=first)
    assert get_active_deepspeed_plugin(single) is first
