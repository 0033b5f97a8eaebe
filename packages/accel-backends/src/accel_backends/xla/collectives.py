"""The collectives of the ``xla`` strategy: XLA tensors through torch_xla's, the rest through gloo.

A tensor on the XLA device is gathered, reduced and broadcast by torch_xla's own collectives
(``xm.all_gather``, ``xm.all_reduce``, ``xm.collective_broadcast``), which run inside the XLA
graph; torch.distributed's gloo group (the one ``torchrun`` forms) can't read XLA memory. CPU
tensors and picklable objects go through accel_ops over that group. With one replica every call
still runs torch_xla's collective, as Hugging Face Accelerate's XLA path does: a 0-dim tensor is
gathered into shape ``(1,)``.
"""

from __future__ import annotations

from typing import Any

import torch

from accel_backends.xla.tensors import is_xla_tensor
from accel_core.strategies.abilities import CollectiveData

#: The reductions ``reduce`` accepts (those of ``accel_ops.reduce``).
REDUCTIONS = ("mean", "sum", "max", "none")


def _apply(function: Any, data: CollectiveData, *args: Any) -> CollectiveData:
    from accel_ops import recursively_apply

    return recursively_apply(function, data, *args, error_on_other_type=True)


def gather(data: CollectiveData) -> CollectiveData:
    """Concatenate each tensor of ``data`` across replicas along dim 0, in ordinal order."""
    return _apply(_gather_one, data)


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    if not is_xla_tensor(tensor):
        from accel_ops import gather as gather_on_group

        return gather_on_group(tensor)
    import torch_xla.core.xla_model as xm

    return xm.all_gather(tensor.reshape(1) if tensor.ndim == 0 else tensor, dim=0)


def gather_object(obj: object) -> list[object]:
    """Every replica's ``obj`` in ordinal order (lists concatenated), over the process group."""
    from accel_ops import gather_object as gather_objects_on_group

    return gather_objects_on_group(obj)


def reduce(
    data: CollectiveData, replicas: int, reduction: str = "sum", scale: float = 1.0
) -> CollectiveData:
    """Reduce each tensor of ``data`` across the ``replicas``; the input is not changed.

    ``"mean"`` is the sum divided by ``replicas``, ``"none"`` a copy; the result is multiplied by
    ``scale`` (torch_xla's own ``scale`` argument is skipped on one replica, so it is not used).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduce(reduction={reduction!r}) is not one of {', '.join(REDUCTIONS)}")
    return _apply(_reduce_one, data, replicas, reduction, scale)


def _reduce_one(tensor: torch.Tensor, replicas: int, reduction: str, scale: float) -> torch.Tensor:
    if not is_xla_tensor(tensor):
        from accel_ops import reduce as reduce_on_group

        return reduce_on_group(tensor, reduction=reduction, scale=scale)
    import torch_xla.core.xla_model as xm

    result = tensor.clone()
    if reduction != "none":
        operation = xm.REDUCE_MAX if reduction == "max" else xm.REDUCE_SUM
        result = xm.all_reduce(operation, result)
        if reduction == "mean":
            result = result / replicas
    if scale != 1.0:
        result = result * scale
    return result


def broadcast(data: CollectiveData, replicas: int, from_process: int = 0) -> CollectiveData:
    """``from_process``'s tensors on every replica, in place (the same structure comes back)."""
    if not 0 <= from_process < replicas:
        raise ValueError(
            f"broadcast(from_process={from_process}) is out of range: there are {replicas} "
            f"replica(s), so expected 0 <= from_process < {replicas}"
        )
    return _apply(_broadcast_one, data, from_process)


def _broadcast_one(tensor: torch.Tensor, from_process: int) -> torch.Tensor:
    if not is_xla_tensor(tensor):
        from accel_ops import broadcast as broadcast_on_group

        return broadcast_on_group(tensor, from_process=from_process)
    import torch_xla.core.xla_model as xm

    xm.collective_broadcast([tensor], root_ordinal=from_process)
    return tensor
