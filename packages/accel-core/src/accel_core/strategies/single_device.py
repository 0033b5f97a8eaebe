"""The ``single_device`` strategy: one process, one device, no wrapper around the model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from accel_core.strategies.base import Strategy

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import KwargsHandler
    from accel_core.state import AcceleratorState


class SingleDeviceStrategy(Strategy):
    """Train in one process on the Accelerator's device (CPU, one GPU or MPS).

    Takes no options. ``kwargs_handlers`` is accepted (and ignored) like every strategy's.
    """

    name = "single_device"

    def __init__(self, kwargs_handlers: Sequence[KwargsHandler] = (), **options: object) -> None:
        if options:
            raise TypeError(
                f"strategy {self.name!r} takes no options, got {sorted(options)}; remove them "
                "from ACCEL_STRATEGY_CONFIG or the strategy options."
            )
        self.kwargs_handlers = tuple(kwargs_handlers)
        self.device = torch.device("cpu")
        self.compat.replicates_model = True

    def setup_environment(self, state: AcceleratorState) -> None:
        """Take the device from ``state``; refuse to run with more than one process."""
        from accel_ops import DistributedType

        if state.num_processes > 1:
            raise ValueError(
                f"strategy 'single_device' runs one process, but this job has "
                f"{state.num_processes} (WORLD_SIZE); choose strategy 'ddp' or launch one process."
            )
        self.device = state.device
        self.compat.distributed_type = DistributedType.NO

    @property
    def root_device(self) -> torch.device:
        """The process state's device (CPU, ``cuda:N``, ``mps``...)."""
        return self.device

    def setup_module(self, module: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``module`` to the device when ``device_placement``; no wrapper."""
        return module.to(self.device) if device_placement else module
