"""Local SGD: train without gradient synchronisation, average the weights every few steps.

Each process takes ``local_sgd_steps`` optimizer steps on its own gradients, then the processes
average their parameters. Communication drops by that factor compared with DDP's all-reduce of
every gradient (Stich, "Local SGD Converges Fast and Communicates Little", ICLR 2019).
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

if TYPE_CHECKING:
    from accel_core.strategies import Strategy


class LocalSGDHost(Protocol):
    """What LocalSGD needs of its accelerator (an ``Accelerator`` has it)."""

    num_processes: int
    strategy: Strategy

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """``tensor`` reduced over every process."""
        ...


class LocalSGD:
    """Context manager that turns DDP training into local SGD.

    ``accelerator`` needs ``num_processes``, ``strategy`` and ``reduce(tensor, reduction="mean")``
    (an ``Accelerator`` has them); its strategy must replicate the model on every process
    (``Strategy.compat.replicates_model``). Inside the ``with`` block
    the model's gradient synchronisation is off (``model.no_sync()`` when the model has it); call
    :meth:`step` after every ``optimizer.step()``, and every ``local_sgd_steps`` calls the
    parameters are replaced by their mean over all processes. Leaving the block averages once more
    (unless an exception is leaving it). With one process, or ``enabled=False``, it does nothing.

    Example::

        with LocalSGD(accelerator, model, local_sgd_steps=8) as local_sgd:
            for batch in loader:
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                local_sgd.step()
    """

    def __init__(
        self,
        accelerator: LocalSGDHost,
        model: torch.nn.Module,
        local_sgd_steps: int,
        enabled: bool = True,
    ) -> None:
        strategy = accelerator.strategy
        if not strategy.compat.replicates_model:
            raise NotImplementedError(
                f"LocalSGD needs a strategy that keeps the whole model on every process, and "
                f"strategy {strategy.name!r} does not (its replicates_model is False): LocalSGD "
                "averages whole copies of the model, which sharded or engine-managed models don't "
                "keep. Use the ddp strategy."
            )
        if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int):
            raise TypeError(f"local_sgd_steps must be an int >= 1, got {local_sgd_steps!r}")
        if local_sgd_steps < 1:
            raise ValueError(f"local_sgd_steps must be an int >= 1, got {local_sgd_steps}")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = bool(enabled) and accelerator.num_processes > 1
        self.num_steps = 0
        self._no_sync: contextlib.AbstractContextManager[object] | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            no_sync = getattr(self.model, "no_sync", None)
            self._no_sync = no_sync() if no_sync is not None else contextlib.nullcontext()
            self._no_sync.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._no_sync is None:
            return
        try:
            # Averaging is a collective: a process leaving on an error would wait for ever.
            if exc_type is None:
                self._sync_and_avg_model_params()
        finally:
            self._no_sync.__exit__(exc_type, exc, tb)
            self._no_sync = None

    def step(self) -> None:
        """Count one optimizer step; average the parameters every ``local_sgd_steps`` steps."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._sync_and_avg_model_params()

    @torch.no_grad()
    def _sync_and_avg_model_params(self) -> None:
        """Replace every parameter by its mean over the processes, one all-reduce per dtype."""
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for param in self.model.parameters():
            groups.setdefault((param.device, param.dtype), []).append(param.data)
        for tensors in groups.values():
            flat = _flatten_dense_tensors(tensors)
            averaged = self.accelerator.reduce(flat, reduction="mean")
            for tensor, synced in zip(
                tensors, _unflatten_dense_tensors(averaged, tensors), strict=True
            ):
                tensor.copy_(synced)
