"""The ``ddp`` strategy: one process per device, gradients averaged by DistributedDataParallel."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from accel_core.kwargs_handlers import DistributedDataParallelKwargs
from accel_core.strategies.single_device import SingleDeviceStrategy
from accel_ops import DistributedType

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import KwargsHandler
    from accel_core.state import AcceleratorState

#: Distributed types of several accelerator devices (Accelerate's ``multi_device``); not CPU.
MULTI_DEVICE_TYPES = frozenset(
    {
        DistributedType.MULTI_GPU,
        DistributedType.MULTI_MLU,
        DistributedType.MULTI_SDAA,
        DistributedType.MULTI_MUSA,
        DistributedType.MULTI_NPU,
        DistributedType.MULTI_XPU,
        DistributedType.MULTI_HPU,
        DistributedType.MULTI_NEURON,
    }
)


class DDPStrategy(SingleDeviceStrategy):
    """Wrap models in ``torch.nn.parallel.DistributedDataParallel``.

    Options: the fields of :class:`~accel_core.DistributedDataParallelKwargs` (from
    ``ACCEL_STRATEGY_CONFIG``); a ``DistributedDataParallelKwargs`` among ``kwargs_handlers``
    takes precedence. Supports no-sync (accumulation) and join (uneven inputs).
    """

    name = "ddp"

    def __init__(self, kwargs_handlers: Sequence[KwargsHandler] = (), **options: Any) -> None:
        super().__init__(kwargs_handlers)
        given = [h for h in kwargs_handlers if isinstance(h, DistributedDataParallelKwargs)]
        try:
            self.ddp_kwargs = given[0] if given else DistributedDataParallelKwargs(**options)
        except TypeError:
            valid = [
                *DistributedDataParallelKwargs().to_dict(),
                *DistributedDataParallelKwargs._HOOK_FIELDS,
            ]
            raise TypeError(
                f"strategy 'ddp' got unknown options {sorted(options)}; valid options: "
                f"{', '.join(valid)}."
            ) from None
        self.local_process_index = 0

    def setup_environment(self, state: AcceleratorState) -> None:
        """Require an initialised process group; take the device and distributed type from it."""
        if not torch.distributed.is_available() or not torch.distributed.is_initialized():
            raise RuntimeError(
                "strategy 'ddp' needs a process group, and none was initialised: start the script "
                "with `accel launch` or `torchrun` (which set RANK and WORLD_SIZE), or choose "
                "strategy 'single_device'."
            )
        self.device = state.device
        self.local_process_index = state.local_process_index
        self.compat.distributed_type = state.partial.distributed_type
        # Accelerate's multi_device: the processes run on accelerator devices, not CPUs.
        self.compat.multi_device = self.compat.distributed_type in MULTI_DEVICE_TYPES

    def setup_module(self, module: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``module`` to the device and wrap it in DDP (models without trainable parameters
        are left unwrapped: there is nothing to average)."""
        model = module.to(self.device) if device_placement else module
        if not any(p.requires_grad for p in model.parameters()):
            return model
        device_ids = [self.device.index or 0] if self.device.type == "cuda" else None
        wrapped = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=device_ids,
            output_device=device_ids[0] if device_ids else None,
            **self.ddp_kwargs.to_kwargs(),
        )
        from accel_core.comm_hooks import register_comm_hook

        register_comm_hook(wrapped, self.ddp_kwargs)
        return wrapped

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync`` on a wrapped model (a null context otherwise)."""
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        inner = getattr(model, "_orig_mod", None)  # torch.compile around DDP
        if isinstance(inner, torch.nn.parallel.DistributedDataParallel):
            return inner.no_sync()
        return contextlib.nullcontext()

    def join(self, joinables: list[torch.nn.Module]) -> contextlib.AbstractContextManager[Any]:
        """torch's ``Join`` context over the DDP models in ``joinables``."""
        from torch.distributed.algorithms import Join

        return Join(joinables)
