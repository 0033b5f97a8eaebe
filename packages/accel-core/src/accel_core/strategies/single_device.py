"""The ``single_device`` strategy: one process, one device, no wrapper around the model."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from accel_core.strategies.base import Strategy

if TYPE_CHECKING:
    from accel_core.state import AcceleratorState


class SingleDeviceStrategy(Strategy):
    """Train in one process on the Accelerator's device (CPU, one GPU or MPS).

    Takes no options. ``kwargs_handlers`` is accepted (and ignored) like every strategy's.
    """

    name = "single_device"

    def __init__(self, kwargs_handlers: Sequence[Any] = (), **options: Any) -> None:
        if options:
            raise TypeError(
                f"strategy {self.name!r} takes no options, got {sorted(options)}; remove them "
                "from ACCEL_STRATEGY_CONFIG or the strategy options."
            )
        self.kwargs_handlers = tuple(kwargs_handlers)
        self.device = torch.device("cpu")

    def setup_environment(self, state: AcceleratorState) -> None:
        """Take the device from ``state``; refuse to run with more than one process."""
        from accel_ops import DistributedType

        if state.num_processes > 1:
            raise ValueError(
                f"strategy 'single_device' runs one process, but this job has "
                f"{state.num_processes} (WORLD_SIZE); choose strategy 'ddp' or launch one process."
            )
        self.device = state.device
        self.distributed_type = DistributedType.NO

    def wrap_model(self, model: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``model`` to the device when ``device_placement``; no wrapper."""
        return model.to(self.device) if device_placement else model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        device_placement: bool,
        scaler: torch.amp.GradScaler | None,
    ) -> torch.optim.Optimizer:
        """An ``AcceleratedOptimizer`` around ``optimizer``."""
        from accel_core.optimizer import AcceleratedOptimizer

        return AcceleratedOptimizer(optimizer, device_placement=device_placement, scaler=scaler)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``."""
        loss.backward(**kwargs)

    def clip_gradients_norm(
        self, parameters: Iterable[torch.nn.Parameter], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` (gradients are whole on every process)."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The unwrapped model's ``state_dict()`` (the same on every process)."""
        return self.unwrap_model(model, keep_fp32_wrapper=False).state_dict()

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load into the unwrapped model."""
        self.unwrap_model(model).load_state_dict(state_dict)
