"""FullyShardedDataParallelPlugin: Accelerate 1.15's defaults, FSDP_* variables, our launch keys.

Expected values marked "Accelerate 1.15" were printed by the same calls under Hugging Face
Accelerate 1.15 in its own venv.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    CPUOffloadPolicy,
    FullStateDictConfig,
    MixedPrecision,
    MixedPrecisionPolicy,
    OffloadPolicy,
    ShardedStateDictConfig,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy

from accel_backends import FullyShardedDataParallelPlugin


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)


class Net(torch.nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(4, 2)


def test_defaults_are_accelerates_fsdp1():
    plugin = FullyShardedDataParallelPlugin()
    # Accelerate 1.15: FullyShardedDataParallelPlugin() with no variables set
    assert plugin.fsdp_version == 1
    assert plugin.sharding_strategy == ShardingStrategy.FULL_SHARD
    assert plugin.reshard_after_forward is None
    assert plugin.cpu_offload == CPUOffload(offload_params=False)
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT
    assert plugin.state_dict_config == FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    assert (plugin.backward_prefetch, plugin.auto_wrap_policy) == (None, None)
    assert (plugin.use_orig_params, plugin.sync_module_states, plugin.forward_prefetch) == (
        False,
        False,
        False,
    )
    assert (plugin.activation_checkpointing, plugin.cpu_ram_efficient_loading) == (False, False)
    assert plugin.limit_all_gathers is True and plugin.min_num_params is None


def test_fsdp2_defaults():
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    assert plugin.reshard_after_forward is True and plugin.sharding_strategy is None
    assert isinstance(plugin.cpu_offload, OffloadPolicy)
    assert not isinstance(plugin.cpu_offload, CPUOffloadPolicy)
    assert plugin.state_dict_type == StateDictType.SHARDED_STATE_DICT
    assert plugin.state_dict_config == ShardedStateDictConfig(offload_to_cpu=True)
    assert (plugin.use_orig_params, plugin.sync_module_states, plugin.forward_prefetch) == (
        None,
        None,
        None,
    )


def test_fsdp2_from_accelerates_variables(monkeypatch: pytest.MonkeyPatch):
    variables = {
        "FSDP_VERSION": "2",
        "FSDP_RESHARD_AFTER_FORWARD": "false",
        "FSDP_OFFLOAD_PARAMS": "true",
        "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "Linear,ReLU",
        "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
        "FSDP_ACTIVATION_CHECKPOINTING": "true",
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    plugin = FullyShardedDataParallelPlugin()
    # Accelerate 1.15: 2 False CPUOffloadPolicy(pin_memory=True) transformer_auto_wrap_policy
    # ['Linear', 'ReLU'] FULL_STATE_DICT True
    assert (plugin.fsdp_version, plugin.reshard_after_forward) == (2, False)
    assert plugin.cpu_offload == CPUOffloadPolicy(pin_memory=True)
    assert plugin.auto_wrap_policy is transformer_auto_wrap_policy
    assert plugin.transformer_cls_names_to_wrap == ["Linear", "ReLU"]
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT
    assert plugin.activation_checkpointing is True


def test_fsdp1_from_accelerates_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "2")
    monkeypatch.setenv("FSDP_BACKWARD_PREFETCH", "BACKWARD_POST")
    monkeypatch.setenv("FSDP_USE_ORIG_PARAMS", "true")
    monkeypatch.setenv("FSDP_MIN_NUM_PARAMS", "100")
    monkeypatch.setenv("FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP")
    plugin = FullyShardedDataParallelPlugin()
    # Accelerate 1.15: SHARD_GRAD_OP BACKWARD_POST True 100 size_based_auto_wrap_policy
    assert plugin.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    assert plugin.backward_prefetch == BackwardPrefetch.BACKWARD_POST
    assert (plugin.use_orig_params, plugin.min_num_params) == (True, 100)
    plugin.set_auto_wrap_policy(torch.nn.Sequential(torch.nn.Linear(10, 10)))
    assert plugin.auto_wrap_policy.func is size_based_auto_wrap_policy
    assert plugin.auto_wrap_policy.keywords == {"min_num_params": 100}


def test_launch_config_wins_over_accelerates_variables(monkeypatch: pytest.MonkeyPatch):
    # The keys of the config file's fsdp_config section, as `accel launch --use_fsdp` writes them.
    config = {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "Block",
        "fsdp_cpu_ram_efficient_loading": True,
    }
    monkeypatch.setenv("ACCEL_STRATEGY", "fsdp")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps(config))
    monkeypatch.setenv("FSDP_VERSION", "1")
    monkeypatch.setenv("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    plugin = FullyShardedDataParallelPlugin()
    assert (plugin.fsdp_version, plugin.reshard_after_forward) == (2, False)
    assert plugin.transformer_cls_names_to_wrap == ["Block"]
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT  # only in Accelerate's
    assert plugin.cpu_ram_efficient_loading is True


def test_fsdp1_reshard_after_forward_takes_a_strategy():
    plugin = FullyShardedDataParallelPlugin(reshard_after_forward="SHARD_GRAD_OP")
    # Accelerate 1.15: SHARD_GRAD_OP FULL_SHARD
    assert plugin.reshard_after_forward == ShardingStrategy.SHARD_GRAD_OP
    assert plugin.sharding_strategy == ShardingStrategy.FULL_SHARD


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fsdp_version": 2, "sharding_strategy": "FULL_SHARD"}, "reshard_after_forward set to"),
        ({"fsdp_version": 2, "forward_prefetch": True}, "forward_prefetch is not yet implemented"),
        ({"fsdp_version": 2, "state_dict_type": "LOCAL_STATE_DICT"}, "FSDP2 does not support"),
        ({"auto_wrap_policy": "bogus"}, "Invalid auto wrap policy: bogus"),
        ({"activation_checkpointing_offload": True}, "requires `activation_checkpointing=True`"),
        ({"reshard_after_forward": True}, "not supported with FSDP1"),
        ({"sharding_strategy": "HALF_SHARD"}, "not an FSDP sharding strategy"),
        ({"fsdp_version": 3}, "fsdp_version must be 1 or 2"),
    ],
)
def test_contradictions_are_accelerates_errors(options: dict, message: str):
    with pytest.raises(ValueError, match=message):
        FullyShardedDataParallelPlugin(**options)


def test_obsolete_fsdp1_options_are_dropped_for_fsdp2():
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        use_orig_params=True,
        sync_module_states=True,
        backward_prefetch="BACKWARD_PRE",
    )
    assert (plugin.use_orig_params, plugin.sync_module_states, plugin.backward_prefetch) == (
        None,
        None,
        None,
    )


def test_mixed_precision_policies():
    dtypes = {
        "param_dtype": torch.bfloat16,
        "reduce_dtype": torch.float32,
        "buffer_dtype": torch.bfloat16,
    }
    plugin = FullyShardedDataParallelPlugin(mixed_precision_policy=dict(dtypes))
    assert plugin.mixed_precision_policy == MixedPrecision(**dtypes)  # Accelerate 1.15: the same
    fsdp2 = FullyShardedDataParallelPlugin(fsdp_version=2, mixed_precision_policy="fp16")
    # Accelerate 1.15: MixedPrecisionPolicy(param_dtype=fp16, reduce_dtype=fp16, output_dtype=fp16)
    assert fsdp2.mixed_precision_policy == MixedPrecisionPolicy(
        param_dtype=torch.float16, reduce_dtype=torch.float16, output_dtype=torch.float16
    )
    with pytest.raises(ValueError, match="Invalid mixed precision: fp4"):
        FullyShardedDataParallelPlugin(mixed_precision_policy="fp4")
    with pytest.raises(ValueError, match="Invalid mixed precision policy"):
        FullyShardedDataParallelPlugin(mixed_precision_policy={"param_dtype": torch.bfloat16})
    fsdp2.set_mixed_precision("bf16")  # an existing policy object is kept without override
    assert fsdp2.mixed_precision_policy.param_dtype == torch.float16
    fsdp2.set_mixed_precision("bf16", override=True)
    assert fsdp2.mixed_precision_policy.param_dtype == torch.bfloat16


def test_transformer_wrap_uses_no_split_modules_and_checks_names():
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(Net())
    assert plugin.transformer_cls_names_to_wrap == ["Block"]
    assert plugin.auto_wrap_policy.keywords == {"transformer_layer_cls": {Block}}
    missing = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Missing"]
    )
    with pytest.raises(ValueError, match="Could not find the transformer layer class Missing"):
        missing.set_auto_wrap_policy(Net())
    unsized = FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap")
    unsized.set_auto_wrap_policy(Net())
    assert unsized.auto_wrap_policy is None  # min_num_params 0 wraps nothing


def test_ram_efficient_loading_syncs_states_and_initialises_on_cpu():
    with pytest.warns(UserWarning, match="Setting sync_module_states to True"):
        plugin = FullyShardedDataParallelPlugin(cpu_ram_efficient_loading=True)
    # Accelerate 1.15 raises "There are currently no available devices found" on CPU; accel
    # initialises meta parameters on CPU (its FSDP shards for real on multi-CPU).
    assert plugin.sync_module_states is True
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"  # for transformers
    with torch.device("meta"):
        layer = torch.nn.Linear(3, 3)
    plugin.param_init_fn(layer)
    assert layer.weight.device == torch.device("cpu")


def test_set_state_dict_type_switches_configs():
    plugin = FullyShardedDataParallelPlugin(state_dict_type="sharded_state_dict")
    assert plugin.state_dict_type == StateDictType.SHARDED_STATE_DICT
    plugin.state_dict_config = None
    plugin.set_state_dict_type("FULL_STATE_DICT")
    assert plugin.state_dict_config == FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    assert FullyShardedDataParallelPlugin(state_dict_type="3").state_dict_type == (
        StateDictType.SHARDED_STATE_DICT
    )
