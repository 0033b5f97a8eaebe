"""Whether optional libraries are installed, without importing them (``accelerate.utils.imports``).

A library counts as available when Python finds its module *and* its distribution is installed,
so a stray folder named ``wandb`` in the working directory does not count (Accelerate's rule).
A check costs a ``find_spec`` and a metadata lookup, well under a millisecond, and is not cached:
a library installed during the session is seen. Minimum versions are Accelerate's. Checks of
devices and number formats are in :mod:`accel_ops.accelerators`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from accel_base.env_values import parse_bool
from accel_ops.accelerate_spellings import read_accel_variable

if TYPE_CHECKING:
    from packaging.version import Version


def installed_version(module: str, distribution: str | None = None) -> Version | None:
    """The version of the distribution that provides ``module``, or None when either is missing.

    ``distribution`` is the name on PyPI when it differs from the module (``ms-amp`` for
    ``msamp``). Nothing is imported but ``packaging``, once a distribution is found.
    """
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        text = importlib.metadata.version(distribution or module)
    except importlib.metadata.PackageNotFoundError:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def _has(module: str, distribution: str | None = None) -> bool:
    return installed_version(module, distribution) is not None


def _at_least(module: str, minimum: str, distribution: str | None = None) -> bool:
    from packaging.version import Version

    version = installed_version(module, distribution)
    return version is not None and version >= Version(minimum)


def is_deepspeed_available() -> bool:
    """Whether DeepSpeed is installed."""
    return _has("deepspeed")


def is_torchao_available() -> bool:
    """Whether torchao 0.6.1 or later is installed."""
    return _at_least("torchao", "0.6.1")


def is_msamp_available() -> bool:
    """Whether MS-AMP is installed."""
    return _has("msamp", "ms-amp")


def is_transformer_engine_available() -> bool:
    """Whether NVIDIA Transformer Engine (Intel's on Gaudi) is installed."""
    from accel_ops.accelerators import is_hpu_available

    if is_hpu_available():
        return _has("intel_transformer_engine", "intel-transformer-engine")
    return _has("transformer_engine", "transformer-engine")


def is_transformer_engine_mxfp8_available() -> bool:
    """Whether Transformer Engine is installed and this GPU supports its MXFP8 recipe."""
    if not _has("transformer_engine", "transformer-engine"):
        return False
    from transformer_engine.pytorch.fp8 import check_mxfp8_support

    return bool(check_mxfp8_support()[0])


def is_fp8_available() -> bool:
    """Whether an FP8 library is installed: MS-AMP, Transformer Engine or torchao.

    accel itself does not train in FP8 (``mixed_precision="fp8"`` is refused with an error).
    """
    return is_msamp_available() or is_transformer_engine_available() or is_torchao_available()


def is_bnb_available(min_version: str | None = None) -> bool:
    """Whether bitsandbytes (at least ``min_version`` when given) is installed."""
    if min_version is None:
        return _has("bitsandbytes")
    return _at_least("bitsandbytes", min_version)


def is_4bit_bnb_available() -> bool:
    """Whether bitsandbytes 0.39.0 or later (4-bit layers) is installed."""
    return is_bnb_available("0.39.0")


def is_8bit_bnb_available() -> bool:
    """Whether bitsandbytes 0.37.2 or later (8-bit layers) is installed."""
    return is_bnb_available("0.37.2")


def is_bitsandbytes_multi_backend_available() -> bool:
    """Whether the installed bitsandbytes has its multi-backend feature (imports bitsandbytes)."""
    if not is_bnb_available():
        return False
    import bitsandbytes

    return "multi_backend" in getattr(bitsandbytes, "features", set())


def is_megatron_lm_available() -> bool:
    """Whether Megatron-LM is enabled (``ACCELERATE_USE_MEGATRON_LM``) and megatron-core >= 0.8.

    accel has no Megatron-LM strategy; this only reports what is installed.
    """
    flag = os.environ.get("ACCELERATE_USE_MEGATRON_LM", "false")
    try:
        if not parse_bool(flag):
            return False
    except ValueError:
        return False
    if not _at_least("megatron", "0.8.0", "megatron-core"):
        return False
    try:
        return importlib.util.find_spec("megatron.training") is not None
    except (ImportError, ValueError):
        return False


def is_lomo_available() -> bool:
    """Whether the LOMO optimizers (``lomo-optim``) are installed."""
    return _has("lomo_optim", "lomo-optim")


def is_schedulefree_available() -> bool:
    """Whether schedulefree is installed."""
    return _has("schedulefree")


def is_peft_available() -> bool:
    """Whether PEFT is installed."""
    return _has("peft")


def is_transformers_available() -> bool:
    """Whether transformers is installed."""
    return _has("transformers")


def is_datasets_available() -> bool:
    """Whether datasets is installed."""
    return _has("datasets")


def is_timm_available() -> bool:
    """Whether timm is installed."""
    return _has("timm")


def is_torchvision_available() -> bool:
    """Whether torchvision is installed."""
    return _has("torchvision")


def is_torchdata_available() -> bool:
    """Whether torchdata is installed."""
    return _has("torchdata")


def is_torchdata_stateful_dataloader_available() -> bool:
    """Whether torchdata 0.8.0 or later (with ``StatefulDataLoader``) is installed."""
    return _at_least("torchdata", "0.8.0")


def is_triton_available() -> bool:
    """Whether Triton (``triton-xpu`` on Intel XPUs) is installed."""
    from accel_ops.accelerators import is_xpu_available

    if is_xpu_available():
        return _has("triton", "triton-xpu")
    return _has("triton")


def is_numpy_available(min_version: str = "1.25.0") -> bool:
    """Whether numpy ``min_version`` or later is installed."""
    return _at_least("numpy", min_version)


def is_pandas_available() -> bool:
    """Whether pandas is installed."""
    return _has("pandas")


def is_matplotlib_available() -> bool:
    """Whether matplotlib is installed."""
    return _has("matplotlib")


def is_tqdm_available() -> bool:
    """Whether tqdm is installed."""
    return _has("tqdm")


def is_rich_available() -> bool:
    """Whether rich is installed *and* enabled with ``ACCEL_ENABLE_RICH`` (or Accelerate's
    ``ACCELERATE_ENABLE_RICH``), as in Accelerate."""
    if not _has("rich"):
        return False
    flag = read_accel_variable("ACCEL_ENABLE_RICH")
    try:
        return flag is not None and parse_bool(flag)
    except ValueError:
        return False


def is_pytest_available() -> bool:
    """Whether pytest is installed."""
    return _has("pytest")


def is_import_timer_available() -> bool:
    """Whether import-timer is installed."""
    return _has("import_timer")


def is_pynvml_available() -> bool:
    """Whether NVML's Python bindings (``pynvml`` or ``nvidia-ml-py``) are installed."""
    return _has("pynvml") or _has("pynvml", "nvidia-ml-py")


def is_amdsmi_available() -> bool:
    """Whether AMD SMI's Python bindings are installed."""
    return _has("amdsmi")


def is_boto3_available() -> bool:
    """Whether boto3 is installed."""
    return _has("boto3")


def is_sagemaker_available() -> bool:
    """Whether the SageMaker SDK is installed (accel does not launch on SageMaker)."""
    return _has("sagemaker")


def is_tensorboard_available() -> bool:
    """Whether TensorBoard (or tensorboardX) is installed."""
    return _has("tensorboard") or _has("tensorboardX")


def is_wandb_available() -> bool:
    """Whether Weights & Biases is installed."""
    return _has("wandb")


def is_comet_ml_available() -> bool:
    """Whether Comet ML is installed."""
    return _has("comet_ml")


def is_aim_available() -> bool:
    """Whether Aim older than 4.0 (the API the tracker uses) is installed."""
    from packaging.version import Version

    version = installed_version("aim")
    return version is not None and version < Version("4.0.0")


def is_mlflow_available() -> bool:
    """Whether MLflow (or ``mlflow-skinny``) is installed."""
    return _has("mlflow") or _has("mlflow", "mlflow-skinny")


def is_clearml_available() -> bool:
    """Whether ClearML is installed."""
    return _has("clearml")


def is_dvclive_available() -> bool:
    """Whether DVCLive is installed."""
    return _has("dvclive")


def is_swanlab_available() -> bool:
    """Whether SwanLab is installed."""
    return _has("swanlab")


def is_trackio_available() -> bool:
    """Whether Trackio is installed (it needs Python 3.10 or later)."""
    return sys.version_info >= (3, 10) and _has("trackio")
