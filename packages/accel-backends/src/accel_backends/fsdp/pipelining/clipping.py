"""The gradient norm of a model split into pipeline stages: each stage's norm (over its FSDP2
shards) combined over the ``pp`` group (the p-th powers summed, or the maximum for the infinity
norm), so that every stage clips by the same factor, as one process holding the whole model
would."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def clip_grad_norm_over_stages(
    parameters: Iterable[torch.nn.Parameter],
    max_norm: float,
    norm_type: float,
    pp_group: ProcessGroup,
    device: torch.device,
) -> torch.Tensor:
    """Clip the gradients of this stage's ``parameters`` so that the whole model's gradient norm
    is at most ``max_norm``; return that norm before clipping (a plain float64 tensor, the same
    on every process). A collective over ``pp_group``."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        local = torch.nn.utils.get_total_norm(grads, norm_type)
        local = local.full_tensor() if isinstance(local, DTensor) else local
        local = local.detach().to(device=device, dtype=torch.float64)
    else:
        local = torch.zeros((), dtype=torch.float64, device=device)
    if math.isinf(norm_type):
        dist.all_reduce(local, op=dist.ReduceOp.MAX, group=pp_group)
        total = local
    else:
        powered = local**norm_type
        dist.all_reduce(powered, op=dist.ReduceOp.SUM, group=pp_group)
        total = powered ** (1.0 / norm_type)
    scale = max_norm / (float(total) + 1e-6)
    if scale < 1.0:
        for grad in grads:
            grad.mul_(scale)
    return total
