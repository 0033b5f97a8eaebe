"""``accelerate.utils.deepspeed``: DeepSpeed helpers."""

from accel._lazy import export_table

_NAMES = {
    "DeepSpeedEngineWrapper": "accel_backends",
    "DeepSpeedOptimizerWrapper": "accel_backends",
    "DeepSpeedSchedulerWrapper": "accel_backends",
    "DummyOptim": "accel_backends",
    "DummyScheduler": "accel_backends",
    "HfDeepSpeedConfig": "accel_backends",
    "get_active_deepspeed_plugin": "accel_backends",
    "map_pytorch_optim_to_deepspeed": "accel_backends",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
