"""``accelerate.utils.dataclasses``: configuration dataclasses, kwargs handlers and enums."""

from accel._lazy import export_table

_NAMES = {
    # accel-core: configuration and kwargs handlers
    "KwargsHandler": "accel_core",
    "AutocastKwargs": "accel_core",
    "DistributedDataParallelKwargs": "accel_core",
    "GradScalerKwargs": "accel_core",
    "InitProcessGroupKwargs": "accel_core",
    "ProfileKwargs": "accel_core",
    "DDPCommunicationHookType": "accel_core",
    "DataLoaderConfiguration": "accel_core",
    "ProjectConfiguration": "accel_core",
    "GradientAccumulationPlugin": "accel_core",
    "TorchDynamoPlugin": "accel_core",
    "LoggerType": "accel_core",
    "get_module_class_from_name": "accel_core",
    # accel-core, out of scope: FP8 recipes (built as in Accelerate, refused by Accelerator)
    "AORecipeKwargs": "accel_core.fp8_recipes",
    "TERecipeKwargs": "accel_core.fp8_recipes",
    "MSAMPRecipeKwargs": "accel_core.fp8_recipes",
    "FP8RecipeKwargs": "accel_core.fp8_recipes",
    "FP8BackendType": "accel_core.fp8_recipes",
    "SageMakerDistributedType": "accel_core.sagemaker",
    # accel-ops: enums and the process's tensor descriptions
    "BaseEnum": "accel_ops.enums",
    "EnumWithContains": "accel_ops.enums",
    "DistributedType": "accel_ops",
    "ComputeEnvironment": "accel_ops",
    "PrecisionType": "accel_ops",
    "DynamoBackend": "accel_ops",
    "RNGType": "accel_ops",
    "TensorInformation": "accel_ops",
    # accel-bigmodel
    "CustomDtype": "accel_bigmodel",
    "BnbQuantizationConfig": "accel_bigmodel",
    # accel-backends: engines and parallelism plugins
    "DeepSpeedPlugin": "accel_backends",
    "FullyShardedDataParallelPlugin": "accel_backends",
    "MegatronLMPlugin": "accel_backends",
    "TorchTensorParallelPlugin": "accel_backends",
    "TorchTensorParallelConfig": "accel_backends",
    "TorchContextParallelConfig": "accel_backends",
    "DeepSpeedSequenceParallelConfig": "accel_backends",
    "MODEL_CONFIGS_TO_MEGATRON_PARSERS": "accel_backends",
    "add_model_config_to_megatron_parser": "accel_backends",
    "parse_bert_config": "accel_backends",
    "parse_gpt2_config": "accel_backends",
    "parse_llama_config": "accel_backends",
    "parse_t5_config": "accel_backends",
    "parse_glm4_moe_config": "accel_backends",
    # Type aliases (typing.Literal) of the FP8 recipes and the profiler.
    "Backend": "accel_core.fp8_recipes",
    "OptLevel": "accel_core.fp8_recipes",
    "FP8Format": "accel_core.fp8_recipes",
    "AmaxComputeAlgorithm": "accel_core.fp8_recipes",
    "ProfilerActivity": "accel_core.kwargs_handlers",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
