"""DeepSpeed, FSDP and XLA for accel-core: their plugins and helpers under Accelerate's names.

This release holds the configuration objects and helpers of Hugging Face Accelerate 1.15
(``DeepSpeedPlugin``, ``FullyShardedDataParallelPlugin``, ``ParallelismConfig``, ``fsdp_utils``,
``deepspeed`` utilities) and three strategies: ``fsdp`` (FSDP2 and FSDP1,
:class:`FSDPStrategy`), ``deepspeed`` (:class:`DeepSpeedStrategy`) and ``xla``
(:class:`XLAStrategy`). What needs a feature not built yet (DeepSpeed's NVMe offload) raises
``StrategyNotBuiltError`` naming it.
Megatron-LM and tensor, context and sequence parallelism are out of scope: their names port, using
them raises ``OutOfScopeError``.

Public names are imported from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.2"

#: Strategies this package registers in the ``accel.strategies`` entry-point group.
PROVIDED_STRATEGIES: tuple[str, ...] = ("fsdp", "deepspeed", "xla")

# public name -> module of accel_backends that defines it
_EXPORTS = {
    "StrategyNotBuiltError": "errors",
    "EngineNotInstalledError": "errors",
    "DeepSpeedPlugin": "deepspeed_plugin",
    "DeepSpeedStrategy": "deepspeed_strategy",
    "XLAStrategy": "xla_strategy",
    "HfDeepSpeedConfig": "deepspeed_config",
    "DummyOptim": "deepspeed_dummies",
    "DummyScheduler": "deepspeed_dummies",
    "DeepSpeedEngineWrapper": "deepspeed_wrappers",
    "DeepSpeedOptimizerWrapper": "deepspeed_wrappers",
    "DeepSpeedSchedulerWrapper": "deepspeed_wrappers",
    "get_active_deepspeed_plugin": "deepspeed_wrappers",
    "map_pytorch_optim_to_deepspeed": "deepspeed_wrappers",
    "FullyShardedDataParallelPlugin": "fsdp_plugin",
    "FSDPStrategy": "fsdp_strategy",
    "merge_fsdp_weights": "fsdp_checkpoint_files",
    "read_distributed_checkpoint": "fsdp_checkpoint_files",
    "enable_fsdp_ram_efficient_loading": "fsdp_helpers",
    "disable_fsdp_ram_efficient_loading": "fsdp_helpers",
    "ensure_weights_retied": "fsdp_helpers",
    "fsdp2_apply_ac": "fsdp_helpers",
    "fsdp2_canonicalize_names": "fsdp_helpers",
    "fsdp2_prepare_auto_wrap_policy": "fsdp_helpers",
    "fsdp2_switch_optimizer_parameters": "fsdp_helpers",
    "get_fsdp2_grad_scaler": "fsdp_helpers",
    "get_parameters_from_modules": "fsdp_helpers",
    "save_fsdp_model": "fsdp_strategy_calls",
    "load_fsdp_model": "fsdp_strategy_calls",
    "save_fsdp_optimizer": "fsdp_strategy_calls",
    "load_fsdp_optimizer": "fsdp_strategy_calls",
    "fsdp2_prepare_model": "fsdp_strategy_calls",
    "fsdp2_load_full_state_dict": "fsdp_strategy_calls",
    "ParallelismConfig": "parallelism_config",
    "TorchTensorParallelPlugin": "out_of_scope_parallel",
    "TorchTensorParallelConfig": "out_of_scope_parallel",
    "TorchContextParallelConfig": "out_of_scope_parallel",
    "DeepSpeedSequenceParallelConfig": "out_of_scope_parallel",
    "MegatronLMPlugin": "out_of_scope_megatron",
    "MODEL_CONFIGS_TO_MEGATRON_PARSERS": "out_of_scope_megatron_parsers",
    "add_model_config_to_megatron_parser": "out_of_scope_megatron_parsers",
    "parse_bert_config": "out_of_scope_megatron_parsers",
    "parse_gpt2_config": "out_of_scope_megatron_parsers",
    "parse_t5_config": "out_of_scope_megatron_parsers",
    "parse_llama_config": "out_of_scope_megatron_parsers",
    "parse_glm4_moe_config": "out_of_scope_megatron_parsers",
    "AbstractTrainStep": "out_of_scope_megatron_engine",
    "BertTrainStep": "out_of_scope_megatron_engine",
    "GPTTrainStep": "out_of_scope_megatron_engine",
    "T5TrainStep": "out_of_scope_megatron_engine",
    "MegatronEngine": "out_of_scope_megatron_engine",
    "MegatronLMDummyDataLoader": "out_of_scope_megatron_engine",
    "MegatronLMDummyScheduler": "out_of_scope_megatron_engine",
    "MegatronLMOptimizerWrapper": "out_of_scope_megatron_engine",
    "MegatronLMSchedulerWrapper": "out_of_scope_megatron_engine",
    "avg_losses_across_data_parallel_group": "out_of_scope_megatron_engine",
    "finish_mpu_init": "out_of_scope_megatron_engine",
    "gather_across_data_parallel_groups": "out_of_scope_megatron_engine",
    "initialize": "out_of_scope_megatron_engine",
    "model_provider_func": "out_of_scope_megatron_engine",
    "prepare_data_loader": "out_of_scope_megatron_engine",
    "prepare_model_optimizer_scheduler": "out_of_scope_megatron_engine",
    "prepare_optimizer": "out_of_scope_megatron_engine",
    "prepare_scheduler": "out_of_scope_megatron_engine",
    "install_xla": "xla_install",
    "DeepSpeedConfigConflict": "deepspeed_sources",
    "ResolvedDeepSpeedConfig": "deepspeed_sources",
    "Sourced": "deepspeed_sources",
}

__all__ = sorted([*_EXPORTS, "PROVIDED_STRATEGIES", "__version__"])


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accel_backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"accel_backends.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
