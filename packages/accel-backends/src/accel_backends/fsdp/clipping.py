"""Clipping the gradient norm of a model whose parameters live on several device meshes.

torch's ``clip_grad_norm_`` stacks the norms of every gradient, which DTensors on different meshes
refuse ("All operands in aten.stack.default must have the same mesh"). transformers'
``DistributedConfig(tp_size=..., fsdp_size=...)`` leaves a model so: the parameters it splits
on the ``fsdp`` x ``tp`` mesh, the others on ``fsdp`` alone. Here the norm of each mesh's group
is taken on its own (a whole tensor), the total combined from those, and every gradient scaled by
the same factor, as torch's function does over one mesh.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def clip_grad_norm_over_meshes(
    parameters: Iterable[torch.nn.Parameter], max_norm: float, norm_type: float = 2.0
) -> torch.Tensor:
    """Clip the total gradient norm of ``parameters`` to ``max_norm``; return the norm before
    clipping (a plain tensor). With every gradient on one mesh (or none a DTensor) this is
    torch's ``clip_grad_norm_``."""
    from torch.distributed.tensor import DTensor

    parameters = list(parameters)
    groups: dict[object, list[torch.Tensor]] = {}
    for parameter in parameters:
        grad = parameter.grad
        if grad is not None:
            key = grad.device_mesh if isinstance(grad, DTensor) else None
            groups.setdefault(key, []).append(grad)
    if len(groups) <= 1:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm
    norms = []
    for grads in groups.values():
        norm = torch.nn.utils.get_total_norm(grads, norm_type)
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.nn.utils.get_total_norm(norms, norm_type)
    scale = max_norm / (float(total) + 1e-6)
    if scale < 1.0:
        for grads in groups.values():
            for grad in grads:
                grad.mul_(scale)
    return total
