"""Megatron-LM, tensor/context/sequence parallelism and install_xla: built like Accelerate's,
refused when used."""

from __future__ import annotations

import pytest
import torch

import accel_backends
from accel_backends import (
    MODEL_CONFIGS_TO_MEGATRON_PARSERS,
    DeepSpeedSequenceParallelConfig,
    MegatronLMDummyDataLoader,
    MegatronLMDummyScheduler,
    MegatronLMPlugin,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
    add_model_config_to_megatron_parser,
    install_xla,
    parse_gpt2_config,
)
from accel_core.out_of_scope import OutOfScopeError


def test_megatron_plugin_builds_accelerates_default_args():
    plugin = MegatronLMPlugin()
    args = plugin.megatron_lm_default_args
    # Accelerate 1.15: MegatronLMPlugin().megatron_lm_default_args (36 keys; a sample here)
    assert len(args) == 36
    assert {k: args[k] for k in ("tensor_model_parallel_size", "clip_grad", "DDP_impl")} == {
        "tensor_model_parallel_size": 1,
        "clip_grad": 1.0,
        "DDP_impl": "torch",
    }
    assert (args["context_parallel_size"], args["recompute_granularity"]) == (2, "full")
    assert (args["attention_backend"], args["eval_interval"]) == (True, 1000)
    assert "recompute_activations" not in args  # Accelerate leaves it out too
    assert (plugin.lr_decay_style, plugin.weight_decay_incr_style, plugin.min_lr) == (
        "linear",
        "constant",
        0,
    )


def test_megatron_plugin_reads_its_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEGATRON_LM_PP_DEGREE", "2")
    monkeypatch.setenv("MEGATRON_LM_USE_CUSTOM_FSDP", "true")
    plugin = MegatronLMPlugin(consumed_samples=[5], other_megatron_args={"x": 1})
    assert (plugin.pp_degree, plugin.use_custom_fsdp, plugin.DDP_impl) == (2, True, "local")
    assert plugin.consumed_samples == [5, 0, 0]
    assert plugin.megatron_lm_default_args["x"] == 1
    monkeypatch.setenv("MEGATRON_LM_TP_DEGREE", "many")
    with pytest.raises(ValueError, match="MEGATRON_LM_TP_DEGREE='many'"):
        MegatronLMPlugin()


def test_using_megatron_is_out_of_scope():
    plugin = MegatronLMPlugin()
    with pytest.raises(OutOfScopeError, match="Megatron-LM"):
        plugin.set_mixed_precision("bf16")
    assert "Megatron-LM" in str(plugin.unsupported_error())
    with pytest.raises(OutOfScopeError, match="parse_gpt2_config"):
        parse_gpt2_config(plugin, None, None)
    refused = {
        "MegatronEngine": 4,
        "MegatronLMOptimizerWrapper": 1,
        "MegatronLMSchedulerWrapper": 2,
        "AbstractTrainStep": 1,
        "GPTTrainStep": 2,
        "initialize": 1,
        "prepare_optimizer": 2,
        "prepare_scheduler": 3,
        "prepare_data_loader": 2,
        "prepare_model_optimizer_scheduler": 1,
        "avg_losses_across_data_parallel_group": 1,
        "gather_across_data_parallel_groups": 1,
        "model_provider_func": 0,
    }
    for name, arity in refused.items():
        with pytest.raises(OutOfScopeError, match=name):
            getattr(accel_backends, name)(*[None] * arity)
    with pytest.raises(OutOfScopeError, match="finish_mpu_init"):
        accel_backends.finish_mpu_init()


def test_megatron_stand_ins_hold_their_arguments():
    loader = MegatronLMDummyDataLoader(data_path=["corpus"], seq_length=128)
    assert loader.dataset_args == {
        "data_path": ["corpus"],
        "seq_length": 128,
        "megatron_dataset_flag": True,
    }
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    scheduler = MegatronLMDummyScheduler(optimizer, total_num_steps=10, warmup_num_steps=2, a=1)
    assert (scheduler.total_num_steps, scheduler.warmup_num_steps, scheduler.kwargs) == (
        10,
        2,
        {"a": 1},
    )


def test_parser_registry_is_accelerates():
    assert sorted(MODEL_CONFIGS_TO_MEGATRON_PARSERS) == [
        "glm4_moe",
        "gpt2",
        "llama",
        "megatron-bert",
        "t5",
    ]

    @add_model_config_to_megatron_parser("tiny-test-model")
    def parse_tiny(plugin: object, model: object, batch: object) -> str:
        return "parsed"

    try:
        assert MODEL_CONFIGS_TO_MEGATRON_PARSERS["tiny-test-model"](None, None, None) == "parsed"
        assert parse_tiny(None, None, None) == "parsed"
        assert parse_tiny.__name__ == "parse_tiny"
    finally:
        del MODEL_CONFIGS_TO_MEGATRON_PARSERS["tiny-test-model"]


def test_parallelism_configs_build_with_accelerates_defaults(monkeypatch: pytest.MonkeyPatch):
    assert TorchTensorParallelPlugin().tp_size == 1
    assert TorchTensorParallelPlugin().torch_device_mesh is None
    assert TorchTensorParallelConfig().enable_async_tp is False
    assert TorchTensorParallelConfig().parallelize_fn is None
    with pytest.warns(UserWarning, match="Async tensor parallelism"):
        TorchTensorParallelConfig(enable_async_tp=True)
    with pytest.raises(TypeError, match="parallelize_fn must be a callable"):
        TorchTensorParallelConfig(parallelize_fn="plan")
    assert TorchContextParallelConfig().cp_comm_strategy == "allgather"
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "alltoall")
    assert TorchContextParallelConfig().cp_comm_strategy == "alltoall"
    with pytest.raises(ValueError, match="Invalid cp_comm_strategy"):
        TorchContextParallelConfig(cp_comm_strategy="ring")
    sequence = DeepSpeedSequenceParallelConfig()
    assert (sequence.sp_seq_length, sequence.sp_seq_length_is_variable) == (None, True)
    with pytest.raises(ValueError, match="sp_seq_length` must be provided"):
        DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False)
    with pytest.raises(ValueError, match="'eager' and 'flex_attention' are not supported"):
        DeepSpeedSequenceParallelConfig(sp_attn_implementation="eager")
    assert DeepSpeedSequenceParallelConfig(
        sp_attn_implementation="kernels-community/flash-attn2"
    ).sp_attn_implementation == ("kernels-community/flash-attn2")
    error = TorchContextParallelConfig().unsupported_error()
    assert isinstance(error, OutOfScopeError) and "Context parallelism" in str(error)


def test_install_xla_installs_nothing():
    with pytest.raises(RuntimeError, match=r"pip install 'accel-backends\[xla\]'"):
        install_xla(upgrade=True)
