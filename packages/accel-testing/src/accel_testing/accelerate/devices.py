"""Which accelerator this process sees, as Accelerate's testing helpers report it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

#: torch's device modules Accelerate's ``get_backend`` asks after CUDA and MPS, in its order.
_DEVICE_MODULES = ("mlu", "sdaa", "musa", "npu", "xpu", "hpu", "neuron")


def _nothing_allocated() -> int:
    return 0


def get_backend() -> tuple[str, int, Callable[..., int]]:
    """``(device type, device count, memory-allocated function)`` of this machine: ``xla`` when
    torch_xla is installed, else the first available of CUDA, MPS, MLU, SDAA, MUSA, NPU, XPU,
    HPU, Neuron, else ``("cpu", 1, lambda: 0)``."""
    import torch

    if importlib.util.find_spec("torch_xla") is not None:
        return "xla", torch.cuda.device_count(), torch.cuda.memory_allocated
    if torch.cuda.is_available():
        return "cuda", torch.cuda.device_count(), torch.cuda.memory_allocated
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps", 1, getattr(torch.mps, "current_allocated_memory", _nothing_allocated)
    for name in _DEVICE_MODULES:
        module = getattr(torch, name, None)
        if module is not None and _available(module):
            return name, module.device_count(), module.memory_allocated
    return "cpu", 1, _nothing_allocated


def _available(module: object) -> bool:
    is_available = getattr(module, "is_available", None)
    try:
        return bool(is_available()) if callable(is_available) else False
    except RuntimeError:
        return False
