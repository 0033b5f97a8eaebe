"""Kwargs handlers, configuration dataclasses and enums."""

from __future__ import annotations

from datetime import timedelta

import pytest

from accel_core import (
    AutocastKwargs,
    DataLoaderConfiguration,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    LoggerType,
    ProfileKwargs,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from accel_core.kwargs_handlers import collect_handlers


def test_to_kwargs_returns_only_values_that_differ_from_the_defaults():
    assert GradScalerKwargs().to_kwargs() == {}
    assert GradScalerKwargs(init_scale=1024.0, growth_interval=5).to_kwargs() == {
        "init_scale": 1024.0,
        "growth_interval": 5,
    }
    assert AutocastKwargs(cache_enabled=False).to_kwargs() == {"cache_enabled": False}
    assert InitProcessGroupKwargs(timeout=timedelta(seconds=9)).to_kwargs() == {
        "timeout": timedelta(seconds=9)
    }
    assert ProfileKwargs(record_shapes=True).to_kwargs() == {"record_shapes": True}


def test_ddp_kwargs_leave_the_hook_fields_out_of_the_constructor_arguments():
    handler = DistributedDataParallelKwargs(
        bucket_cap_mb=10, comm_hook="fp16", comm_state_option={"matrix_approximation_rank": 2}
    )
    assert handler.comm_hook is DDPCommunicationHookType.FP16
    assert handler.to_kwargs() == {"bucket_cap_mb": 10}
    with pytest.raises(ValueError, match="choose 'no', 'fp16' or 'bf16'"):
        DistributedDataParallelKwargs(comm_wrapper="power_sgd")
    with pytest.raises(ValueError, match="comm_hook='gzip' is not valid; choose one of 'no'"):
        DistributedDataParallelKwargs(comm_hook="gzip")


def test_timeout_must_be_a_timedelta():
    with pytest.raises(TypeError, match="timedelta\\(seconds=600\\)"):
        InitProcessGroupKwargs(timeout=600)


def test_handlers_are_indexed_by_type_once_each():
    scaler = GradScalerKwargs()
    assert collect_handlers([scaler]) == {GradScalerKwargs: scaler}
    with pytest.raises(ValueError, match="two GradScalerKwargs"):
        collect_handlers([GradScalerKwargs(), GradScalerKwargs(init_scale=2.0)])
    with pytest.raises(TypeError, match="expected instances of AutocastKwargs"):
        collect_handlers(["fp16"])


def test_configuration_dataclasses_and_enums():
    config = DataLoaderConfiguration()
    assert (config.split_batches, config.even_batches, config.dispatch_batches) == (
        False,
        True,
        None,
    )
    project = ProjectConfiguration(project_dir="runs/a")
    assert project.logging_dir == "runs/a"
    assert (project.automatic_checkpoint_naming, project.total_limit, project.iteration) == (
        False,
        None,
        0,
    )
    assert LoggerType.TENSORBOARD == "tensorboard" and str(LoggerType.WANDB) == "wandb"
    assert DDPCommunicationHookType("power_sgd") is DDPCommunicationHookType.POWER_SGD
    dynamo = TorchDynamoPlugin(backend="INDUCTOR", mode="max-autotune")
    # only what differs from the defaults, as in Accelerate 1.15
    assert dynamo.enabled and dynamo.to_kwargs() == {"backend": "inductor", "mode": "max-autotune"}
    assert not TorchDynamoPlugin().enabled
