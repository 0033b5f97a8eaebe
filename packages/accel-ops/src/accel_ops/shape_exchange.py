"""Telling every process the shape and dtype of a tensor that only one process has.

``TENSOR_TYPE_TO_INT`` numbers the dtypes that can travel this way (Accelerate's numbering);
``TENSOR_INT_TO_DTYPE`` is its inverse.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from accel_ops import _comm

TENSOR_TYPE_TO_INT: dict[torch.dtype, int] = {
    torch.float: 1,
    torch.double: 2,
    torch.half: 3,
    torch.bfloat16: 4,
    torch.uint8: 5,
    torch.int8: 6,
    torch.int16: 7,
    torch.int32: 8,
    torch.int64: 9,
    torch.bool: 10,
}
TENSOR_INT_TO_DTYPE: dict[int, torch.dtype] = {
    code: dtype for dtype, code in TENSOR_TYPE_TO_INT.items()
}


def _code(tensor: torch.Tensor) -> int:
    try:
        return TENSOR_TYPE_TO_INT[tensor.dtype]
    except KeyError:
        names = ", ".join(str(dtype).replace("torch.", "") for dtype in TENSOR_TYPE_TO_INT)
        raise ValueError(
            f"gather_tensor_shape can't send dtype {tensor.dtype}; supported: {names}"
        ) from None


def gather_tensor_shape(tensor: torch.Tensor | None, group: Any = None) -> tuple[torch.Tensor, int]:
    """The shape (a 1-D int64 tensor) and dtype code of the tensor one process passes.

    Exactly one process passes a tensor, the others ``None``; every process gets the same answer,
    the shape on this process's device. Decode the dtype with ``TENSOR_INT_TO_DTYPE``. Raises
    ``ValueError`` on every rank when no process or several pass a tensor. (Accelerate returns
    the shape as a column, ``(ndim, 1)``, and cannot send a shape containing 0; this does both.)
    """
    from accel_ops.collectives import _device_for_collectives

    comm = _comm.resolve(group)
    if comm is None:
        if tensor is None:
            raise ValueError("gather_tensor_shape got None on the only process; pass a tensor")
        mine: Any = (list(tensor.shape), _code(tensor))
        everyone: list[Any] = [mine]
    else:
        mine = None if tensor is None else (list(tensor.shape), _code(tensor))
        everyone = [None] * comm.world_size
        gather_all = dist.all_gather_object
        _comm.call("gather_tensor_shape", comm, gather_all, everyone, mine, group=comm.group)
    owners = [rank for rank, item in enumerate(everyone) if item is not None]
    if len(owners) != 1:
        raise ValueError(
            "gather_tensor_shape needs a tensor on exactly one process and None on the others; "
            f"processes {owners or 'none'} passed a tensor"
        )
    shape, code = everyone[owners[0]]
    return torch.tensor(shape, dtype=torch.int64, device=_device_for_collectives()), int(code)
