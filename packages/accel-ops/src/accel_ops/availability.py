"""Whether optional libraries and devices are present, without importing the libraries."""

from __future__ import annotations

import importlib.util
from typing import Any

import torch


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def is_cuda_available() -> bool:
    """Whether a CUDA device is usable."""
    return torch.cuda.is_available()


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's MPS device is usable."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available() and mps.is_built())


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bfloat16 works here (on CPU it always does)."""
    if is_cuda_available():
        return bool(torch.cuda.is_bf16_supported())
    return True


def is_fp16_available() -> bool:
    """Whether float16 works here."""
    return True


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Whether torch_xla is installed (and, with the flags, drives a TPU or GPU)."""
    if not _installed("torch_xla"):
        return False
    if check_is_tpu or check_is_gpu:
        import torch_xla.runtime as xr

        kind = xr.device_type()
        return (check_is_tpu and kind == "TPU") or (check_is_gpu and kind in ("GPU", "CUDA"))
    return True


def is_deepspeed_available() -> bool:
    """Whether DeepSpeed is installed."""
    return _installed("deepspeed")


def is_rich_available() -> bool:
    """Whether rich is installed."""
    return _installed("rich")


def is_tensorboard_available() -> bool:
    """Whether TensorBoard (or tensorboardX) is installed."""
    return _installed("tensorboard") or _installed("tensorboardX")


def is_wandb_available() -> bool:
    """Whether Weights & Biases is installed."""
    return _installed("wandb")


def is_mlflow_available() -> bool:
    """Whether MLflow is installed."""
    return _installed("mlflow")


def is_aim_available() -> bool:
    """Whether Aim is installed."""
    return _installed("aim")


def is_comet_ml_available() -> bool:
    """Whether Comet ML is installed."""
    return _installed("comet_ml")


def is_transformers_available() -> bool:
    """Whether transformers is installed."""
    return _installed("transformers")


def is_datasets_available() -> bool:
    """Whether datasets is installed."""
    return _installed("datasets")


def is_timm_available() -> bool:
    """Whether timm is installed."""
    return _installed("timm")


def is_torchdata_stateful_dataloader_available() -> bool:
    """Whether torchdata with ``StatefulDataLoader`` is installed."""
    return _installed("torchdata") and _installed("torchdata.stateful_dataloader")


def is_npu_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support Ascend NPUs."""
    return False


def is_xpu_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support Intel XPUs."""
    return False


def is_hpu_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support Habana HPUs."""
    return False


def is_mlu_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support Cambricon MLUs."""
    return False


def is_musa_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support Moore Threads MUSA devices."""
    return False


def is_sdaa_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support SDAA devices."""
    return False


def is_neuron_available(*args: Any, **kwargs: Any) -> bool:
    """Always False: accel does not support AWS Neuron devices."""
    return False
