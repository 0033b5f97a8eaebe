"""Accelerate's tensor-parallel options: ``TorchTensorParallelConfig`` (``ParallelismConfig``'s
``tp_handler``) and the older ``TorchTensorParallelPlugin``.

Tensor parallelism runs under the ``fsdp`` strategy (:mod:`accel_backends.tensor_parallel`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from accel_backends.tensor_parallel import ParallelizeFn


@dataclass
class TorchTensorParallelConfig:
    """How ``prepare`` splits a model over the ``tp`` dimension of the mesh.

    Args:
        enable_async_tp: Accelerate's option; not supported there either (a warning, ignored).
        parallelize_fn: accel's: ``parallelize_fn(model, tp_mesh)`` splits a model that arrives
            whole, in place, over ``tp_mesh`` (``accelerator.torch_device_mesh["tp"]``) --
            typically ``torch.distributed.tensor.parallel.parallelize_module(model, tp_mesh,
            plan)``. Without it the model must arrive split (transformers'
            ``from_pretrained(..., tp_plan="auto")``, or your own ``parallelize_module``).
    """

    enable_async_tp: bool = False
    parallelize_fn: ParallelizeFn | None = None

    def __post_init__(self) -> None:
        if self.enable_async_tp:
            warnings.warn(
                "Async tensor parallelism is currently not supported, ignoring this option.",
                stacklevel=3,
            )
        if self.parallelize_fn is not None and not callable(self.parallelize_fn):
            raise TypeError(
                "parallelize_fn must be a callable parallelize_fn(model, tp_mesh), got "
                f"{type(self.parallelize_fn).__name__}"
            )


@dataclass
class TorchTensorParallelPlugin:
    """Accelerate's older way to ask for tensor parallelism: ``Accelerator(torch_tp_plugin=
    TorchTensorParallelPlugin(tp_size=N))`` is read as ``ParallelismConfig(tp_size=N)`` (with
    Accelerate's deprecation warning)."""

    tp_size: int = 1
    torch_device_mesh: DeviceMesh | None = None
