"""DDP communication hooks chosen with ``DistributedDataParallelKwargs(comm_hook=...)``.

A hook changes what DDP sends when it averages gradients: fp16 or bf16 compression, or PowerSGD's
low-rank approximation; a wrapper (fp16/bf16) compresses what PowerSGD itself sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel_core.configuration import DDPCommunicationHookType
from accel_core.kwargs_handlers import DistributedDataParallelKwargs

_POWER_SGD = (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)


def _hook_for(kind: DDPCommunicationHookType) -> Callable[..., Any] | None:
    if kind == DDPCommunicationHookType.NO:
        return None  # torch's hook modules are imported only for a hook
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    return {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
        DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
        DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
    }.get(kind)


def _wrapper_for(kind: DDPCommunicationHookType) -> Callable[..., Any] | None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
    }.get(kind)


def register_comm_hook(
    model: torch.nn.parallel.DistributedDataParallel, handler: DistributedDataParallelKwargs
) -> bool:
    """Register ``handler``'s hook on ``model``; return whether one was registered."""
    hook = _hook_for(handler.comm_hook)
    if hook is None:
        return False
    wrapper = _wrapper_for(handler.comm_wrapper)
    if wrapper is not None:
        hook = wrapper(hook)
    state: Any = None
    if handler.comm_hook in _POWER_SGD:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(None, **handler.comm_state_option)
    model.register_comm_hook(state=state, hook=hook)
    return True
