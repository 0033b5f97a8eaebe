"""``accelerate.utils.megatron_lm``: Megatron-LM (out of scope in accel)."""

from accel._lazy import export_table

_NAMES = {
    "AbstractTrainStep": "accel_backends",
    "BertTrainStep": "accel_backends",
    "GPTTrainStep": "accel_backends",
    "MegatronEngine": "accel_backends",
    "MegatronLMDummyDataLoader": "accel_backends",
    "MegatronLMDummyScheduler": "accel_backends",
    "MegatronLMOptimizerWrapper": "accel_backends",
    "MegatronLMSchedulerWrapper": "accel_backends",
    "T5TrainStep": "accel_backends",
    "avg_losses_across_data_parallel_group": "accel_backends",
    "finish_mpu_init": "accel_backends",
    "gather_across_data_parallel_groups": "accel_backends",
    "initialize": "accel_backends",
    "model_provider_func": "accel_backends",
    "prepare_data_loader": "accel_backends",
    "prepare_model_optimizer_scheduler": "accel_backends",
    "prepare_optimizer": "accel_backends",
    "prepare_scheduler": "accel_backends",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
