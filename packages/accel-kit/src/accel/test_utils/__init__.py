"""Accelerate's ``accelerate.test_utils``: its testing helpers for accel's environment, defined
in accel-testing (``accel_testing.accelerate``).

accel-testing is the accel repository's private test-helper package: accel-kit does not depend
on it (it is not published, and it brings pytest and a pytest plugin). This module and its
submodules import without it; reading a name without it raises an ImportError that says how to
install it. The ``require_*`` decorators ask this machine (its device kind and count, torch,
installed packages); ``DEFAULT_LAUNCH_COMMAND`` and ``get_launch_command`` run ``accel launch``.
"""

from accel._lazy import export_table

#: How to install the package that defines these names.
INSTALL = (
    "accel-testing is the accel repository's test-helper package, not on PyPI; install it from a "
    "checkout of the repository: pip install ./packages/accel-testing"
)

_NAMES = {
    "DEFAULT_LAUNCH_COMMAND": "accel_testing.accelerate.testing",
    "RegressionDataset": "accel_testing.accelerate.training",
    "RegressionModel": "accel_testing.accelerate.training",
    "are_the_same_tensors": "accel_testing.accelerate.testing",
    "assert_exception": "accel_testing.accelerate.testing",
    "capture_call_output": "accel_testing.accelerate.testing",
    "device_count": "accel_testing.accelerate.testing",
    "execute_subprocess_async": "accel_testing.accelerate.testing",
    "get_launch_command": "accel_testing.accelerate.testing",
    "get_torch_dist_unique_port": "accel_testing.accelerate.testing",
    "memory_allocated_func": "accel_testing.accelerate.testing",
    "path_in_accelerate_package": "accel_testing.accelerate.testing",
    "pytest_xdist_worker_id": "accel_testing.accelerate.testing",
    "require_bnb": "accel_testing.accelerate.testing",
    "require_cpu": "accel_testing.accelerate.testing",
    "require_cuda": "accel_testing.accelerate.testing",
    "require_cuda_or_hpu": "accel_testing.accelerate.testing",
    "require_cuda_or_xpu": "accel_testing.accelerate.testing",
    "require_fp16": "accel_testing.accelerate.testing",
    "require_fp8": "accel_testing.accelerate.testing",
    "require_huggingface_suite": "accel_testing.accelerate.testing",
    "require_mlu": "accel_testing.accelerate.testing",
    "require_mps": "accel_testing.accelerate.testing",
    "require_multi_device": "accel_testing.accelerate.testing",
    "require_multi_gpu": "accel_testing.accelerate.testing",
    "require_multi_gpu_or_xpu": "accel_testing.accelerate.testing",
    "require_multi_xpu": "accel_testing.accelerate.testing",
    "require_musa": "accel_testing.accelerate.testing",
    "require_non_cpu": "accel_testing.accelerate.testing",
    "require_non_hpu": "accel_testing.accelerate.testing",
    "require_non_torch_xla": "accel_testing.accelerate.testing",
    "require_non_xpu": "accel_testing.accelerate.testing",
    "require_npu": "accel_testing.accelerate.testing",
    "require_pippy": "accel_testing.accelerate.testing",
    "require_sdaa": "accel_testing.accelerate.testing",
    "require_single_device": "accel_testing.accelerate.testing",
    "require_single_gpu": "accel_testing.accelerate.testing",
    "require_single_xpu": "accel_testing.accelerate.testing",
    "require_torch_min_version": "accel_testing.accelerate.testing",
    "require_torchao": "accel_testing.accelerate.testing",
    "require_torchvision": "accel_testing.accelerate.testing",
    "require_tpu": "accel_testing.accelerate.testing",
    "require_transformer_engine": "accel_testing.accelerate.testing",
    "require_transformer_engine_mxfp8": "accel_testing.accelerate.testing",
    "require_xpu": "accel_testing.accelerate.testing",
    "run_first": "accel_testing.accelerate.testing",
    "skip": "accel_testing.accelerate.testing",
    "slow": "accel_testing.accelerate.testing",
    "torch_device": "accel_testing.accelerate.testing",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, install=INSTALL)
