"""Which accelerators and number formats this process can use (``accelerate.utils.imports``).

No check initialises a device: CUDA is asked through NVML (``PYTORCH_NVML_BASED_CUDA_CHECK=1``),
so a process can still fork workers after asking. A vendor plug-in (``torch_npu``, ``torch_mlu``,
``habana_frameworks``, ...) is imported only when it is installed, and those answers are cached
for the life of the process, as in Accelerate. accel runs on CUDA (ROCm included), MPS, XLA and
CPU; the other devices are reported truthfully, but accel does not drive them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

import torch

from accel_ops.environment import parse_flag_from_env, patch_environment
from accel_ops.versions import is_torch_version

USE_TORCH_XLA: bool = parse_flag_from_env("USE_TORCH_XLA", default=True)
"""Set ``USE_TORCH_XLA=0`` to run plain torch in an environment where torch_xla is installed."""


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def _torch_xla_imports() -> bool:
    if not USE_TORCH_XLA or not _findable("torch_xla"):
        return False
    try:
        import torch_xla.runtime  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Whether torch_xla can be used (and, with a flag, whether it drives a TPU or a GPU).

    False when ``USE_TORCH_XLA`` is false. Raises ``ValueError`` when both flags are given.
    """
    if check_is_tpu and check_is_gpu:
        raise ValueError("is_torch_xla_available: pass check_is_tpu or check_is_gpu, not both")
    if not _torch_xla_imports():
        return False
    if not (check_is_tpu or check_is_gpu):
        return True
    import torch_xla.runtime as xr

    kind = xr.device_type()
    return kind == "TPU" if check_is_tpu else kind in ("GPU", "CUDA")


def is_cuda_available() -> bool:
    """Whether a CUDA (or ROCm) device is usable, asked through NVML without initialising CUDA."""
    with patch_environment(PYTORCH_NVML_BASED_CUDA_CHECK="1"):
        return bool(torch.cuda.is_available())


def is_rocm_available() -> bool:
    """Whether torch is a ROCm build and an AMD GPU is usable."""
    return torch.version.hip is not None and is_cuda_available()


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's MPS device is usable (and torch is at least ``min_version``)."""
    mps = getattr(torch.backends, "mps", None)
    return bool(
        is_torch_version(">=", min_version)
        and mps is not None
        and mps.is_available()
        and mps.is_built()
    )


@functools.cache
def is_torch_distributed_available() -> bool:
    """Whether this torch build has ``torch.distributed``."""
    return bool(torch.distributed.is_available())


def is_xccl_available() -> bool:
    """Whether torch.distributed has Intel's XCCL backend (torch 2.7 or later)."""
    if not is_torch_version(">=", "2.7.0") or not is_torch_distributed_available():
        return False
    from torch.distributed import distributed_c10d

    check = getattr(distributed_c10d, "is_xccl_available", None)
    return bool(check is not None and check())


def _vendor_device(
    plugin: str, backend_name: str, check_device: bool, environment: dict[str, str] | None = None
) -> bool:
    if not _findable(plugin.partition(".")[0]) or not _findable(plugin):
        return False
    try:
        importlib.import_module(plugin)
    except Exception:  # a plug-in that can't load (e.g. in a CPU-only container) has no device
        return False
    backend = getattr(torch, backend_name, None)
    if backend is None:
        return False
    try:
        with patch_environment(**(environment or {})):
            if check_device:
                backend.device_count()  # raises RuntimeError when there is no device
            return bool(backend.is_available())
    except RuntimeError:
        return False


@functools.cache
def is_npu_available(check_device: bool = False) -> bool:
    """Whether ``torch_npu`` is installed and an Ascend NPU is usable."""
    return _vendor_device("torch_npu", "npu", check_device)


@functools.cache
def is_mlu_available(check_device: bool = False) -> bool:
    """Whether ``torch_mlu`` is installed and a Cambricon MLU is usable (asked through CNDEV)."""
    return _vendor_device("torch_mlu", "mlu", check_device, {"PYTORCH_CNDEV_BASED_MLU_CHECK": "1"})


@functools.cache
def is_musa_available(check_device: bool = False) -> bool:
    """Whether ``torch_musa`` is installed and a Moore Threads GPU is usable."""
    return _vendor_device("torch_musa", "musa", check_device)


@functools.cache
def is_sdaa_available(check_device: bool = False) -> bool:
    """Whether ``torch_sdaa`` is installed and an SDAA device is usable."""
    return _vendor_device("torch_sdaa", "sdaa", check_device)


@functools.cache
def is_neuron_available(check_device: bool = False) -> bool:
    """Whether ``torch_neuronx`` is installed and an AWS Neuron device is usable."""
    return _vendor_device("torch_neuronx", "neuron", check_device)


@functools.cache
def is_hpu_available(init_hccl: bool = False) -> bool:
    """Whether Habana's ``habana_frameworks.torch`` is installed and a Gaudi HPU is usable.

    ``init_hccl`` also loads Habana's collective backend.
    """
    if not _vendor_device("habana_frameworks.torch", "hpu", check_device=False):
        return False
    if init_hccl:
        importlib.import_module("habana_frameworks.torch.distributed.hccl")
    return True


def is_habana_gaudi1() -> bool:
    """Whether the HPU is a first-generation Gaudi (it has no fp16)."""
    if not is_hpu_available():
        return False
    experimental = importlib.import_module("habana_frameworks.torch.utils.experimental")
    device_types = experimental.synDeviceType
    return bool(experimental._get_device_type() == device_types.synDeviceGaudi)


@functools.cache
def is_xpu_available(check_device: bool = False) -> bool:
    """Whether an Intel XPU is usable through stock torch (2.7 or later)."""
    if is_torch_version("<=", "2.6"):
        return False
    xpu = getattr(torch, "xpu", None)
    if xpu is None:
        return False
    try:
        if check_device:
            xpu.device_count()
        return bool(xpu.is_available())
    except RuntimeError:
        return False


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bfloat16 works on this process's accelerator (on CPU it always does).

    On a TPU the answer is ``not ignore_tpu``.
    """
    if is_torch_xla_available(check_is_tpu=True):
        return not ignore_tpu
    if is_cuda_available():
        return bool(torch.cuda.is_bf16_supported())
    if is_mlu_available():
        return bool(torch.mlu.is_bf16_supported())
    if is_xpu_available():
        return bool(torch.xpu.is_bf16_supported())
    if is_mps_available():
        return bool(torch.backends.mps.is_macos_or_newer(14, 0))
    return True


def is_fp16_available() -> bool:
    """Whether float16 works here (everywhere but a first-generation Gaudi)."""
    return not is_habana_gaudi1()


def is_weights_only_available() -> bool:
    """Whether ``torch.load(weights_only=True)`` takes an allow-list of globals (torch 2.4+)."""
    return is_torch_version(">=", "2.4.0")


def is_pippy_available() -> bool:
    """Whether torch has pipeline parallelism (``torch.distributed.pipelining``, torch 2.4+).

    accel does not provide pipeline-parallel inference; this only reports what torch has.
    """
    return is_torch_version(">=", "2.4.0")
