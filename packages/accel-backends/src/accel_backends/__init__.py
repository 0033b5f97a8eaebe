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

__version__ = "0.4.6"

#: Strategies this package registers in the ``accel.strategies`` entry-point group: the engines
#: ``accel_backends.<name>``, each described by ``accel_backends.<name>.description.DESCRIPTION``.
PROVIDED_STRATEGIES: tuple[str, ...] = ("fsdp", "deepspeed", "xla")

# public name -> module of accel_backends that defines it
_EXPORTS = {
    "StrategyNotBuiltError": "errors",
    "EngineNotInstalledError": "errors",
    "DeepSpeedPlugin": "deepspeed.plugin",
    "DeepSpeedStrategy": "deepspeed.strategy",
    "XLAStrategy": "xla.strategy",
    "HfDeepSpeedConfig": "deepspeed.config",
    "DummyOptim": "deepspeed.dummies",
    "DummyScheduler": "deepspeed.dummies",
    "DeepSpeedEngineWrapper": "deepspeed.wrappers",
    "DeepSpeedOptimizerWrapper": "deepspeed.wrappers",
    "DeepSpeedSchedulerWrapper": "deepspeed.wrappers",
    "get_active_deepspeed_plugin": "deepspeed.wrappers",
    "map_pytorch_optim_to_deepspeed": "deepspeed.engine_setup",
    "FullyShardedDataParallelPlugin": "fsdp.plugin",
    "FSDPStrategy": "fsdp.strategy",
    "merge_fsdp_weights": "fsdp.checkpoint_files",
    "read_distributed_checkpoint": "fsdp.checkpoint_files",
    "enable_fsdp_ram_efficient_loading": "fsdp.helpers",
    "disable_fsdp_ram_efficient_loading": "fsdp.helpers",
    "ensure_weights_retied": "fsdp.helpers",
    "fsdp2_apply_ac": "fsdp.activation_checkpointing",
    "fsdp2_canonicalize_names": "fsdp.helpers",
    "fsdp2_prepare_auto_wrap_policy": "fsdp.helpers",
    "fsdp2_switch_optimizer_parameters": "fsdp.helpers",
    "get_fsdp2_grad_scaler": "fsdp.helpers",
    "get_parameters_from_modules": "fsdp.helpers",
    "save_fsdp_model": "fsdp.strategy_calls",
    "load_fsdp_model": "fsdp.strategy_calls",
    "save_fsdp_optimizer": "fsdp.strategy_calls",
    "load_fsdp_optimizer": "fsdp.strategy_calls",
    "fsdp2_prepare_model": "fsdp.strategy_calls",
    "fsdp2_load_full_state_dict": "fsdp.strategy_calls",
    "ParallelismConfig": "parallelism_config",
    "TorchTensorParallelPlugin": "tensor_parallel_config",
    "TorchTensorParallelConfig": "tensor_parallel_config",
    "PipelineParallelConfig": "pipeline_config",
    "ExpertParallelConfig": "expert_parallel_config",
    "TorchContextParallelConfig": "out_of_scope",
    "DeepSpeedSequenceParallelConfig": "out_of_scope",
    "MegatronLMPlugin": "out_of_scope",
    "MODEL_CONFIGS_TO_MEGATRON_PARSERS": "out_of_scope",
    "add_model_config_to_megatron_parser": "out_of_scope",
    "parse_bert_config": "out_of_scope",
    "parse_gpt2_config": "out_of_scope",
    "parse_t5_config": "out_of_scope",
    "parse_llama_config": "out_of_scope",
    "parse_glm4_moe_config": "out_of_scope",
    "AbstractTrainStep": "out_of_scope",
    "BertTrainStep": "out_of_scope",
    "GPTTrainStep": "out_of_scope",
    "T5TrainStep": "out_of_scope",
    "MegatronEngine": "out_of_scope",
    "MegatronLMDummyDataLoader": "out_of_scope",
    "MegatronLMDummyScheduler": "out_of_scope",
    "MegatronLMOptimizerWrapper": "out_of_scope",
    "MegatronLMSchedulerWrapper": "out_of_scope",
    "avg_losses_across_data_parallel_group": "out_of_scope",
    "finish_mpu_init": "out_of_scope",
    "gather_across_data_parallel_groups": "out_of_scope",
    "initialize": "out_of_scope",
    "model_provider_func": "out_of_scope",
    "prepare_data_loader": "out_of_scope",
    "prepare_model_optimizer_scheduler": "out_of_scope",
    "prepare_optimizer": "out_of_scope",
    "prepare_scheduler": "out_of_scope",
    "install_xla": "xla.install",
    "DeepSpeedConfigConflict": "deepspeed.sources",
    "ResolvedDeepSpeedConfig": "deepspeed.sources",
    "Sourced": "deepspeed.sources",
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
