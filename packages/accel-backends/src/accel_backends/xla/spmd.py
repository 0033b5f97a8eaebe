"""SPMD data parallelism for the ``xla`` strategy: one process, every device, the batch sharded.

Under SPMD (``torch_xla.runtime.use_spmd()``) a single process traces the program for the whole
host and XLA's compiler partitions it over the devices from sharding annotations. Data
parallelism needs only one: each tensor the model receives is split along its first dimension
over a one-axis mesh named ``"data"`` (parameters stay replicated, the default). The compiler
then inserts the all-reduce of the gradients, so a step computes what one device would compute on
the whole batch; only the order of floating-point additions differs. A batch whose first
dimension does not divide by the device count is still sharded (XLA pads it).

SPMD is switched on for the whole process and can't be switched off; tensors already on the XLA
device are replicated onto every device when it starts (torch_xla warns).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

#: The mesh axis the batch is split over.
DATA_AXIS = "data"


@dataclass(frozen=True)
class DataMesh:
    """A one-axis mesh over every device of the host, and how inputs are sharded over it."""

    mesh: Any  # torch_xla.distributed.spmd.Mesh
    devices: int
    _hooked: weakref.WeakSet[torch.nn.Module] = field(
        default_factory=weakref.WeakSet, compare=False, repr=False
    )

    @classmethod
    def over_every_device(cls) -> DataMesh:
        """Switch SPMD on and build the mesh over all devices (``CPU_NUM_DEVICES`` on CPU)."""
        import numpy as np
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr

        xr.use_spmd()
        devices = int(xr.global_runtime_device_count())
        mesh = xs.Mesh(np.arange(devices), (devices,), (DATA_AXIS,))
        xs.set_global_mesh(mesh)
        return cls(mesh=mesh, devices=devices)

    def shard_batch(self, tensor: torch.Tensor) -> None:
        """Annotate an XLA ``tensor`` (at least 1-d) as split along dim 0 over the mesh."""
        if tensor.device.type != "xla" or tensor.ndim == 0:
            return
        import torch_xla.distributed.spmd as xs

        xs.mark_sharding(tensor, self.mesh, (DATA_AXIS, *([None] * (tensor.ndim - 1))))

    def shard_inputs_of(self, module: torch.nn.Module) -> None:
        """Shard every tensor ``module``'s forward receives (positional, keyword, nested), from
        a forward pre-hook registered once per module."""
        if module in self._hooked:
            return
        from accel_ops import recursively_apply

        def shard(tensor: torch.Tensor) -> torch.Tensor:
            self.shard_batch(tensor)
            return tensor

        def hook(
            _: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return recursively_apply(shard, args), recursively_apply(shard, kwargs)

        module.register_forward_pre_hook(hook, with_kwargs=True)
        self._hooked.add(module)
