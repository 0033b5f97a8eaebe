"""Stand-ins for an optimizer and a scheduler that the DeepSpeed config file defines.

When the config has an ``optimizer`` (or ``scheduler``) section, DeepSpeed builds it; the training
script passes a :class:`DummyOptim` (:class:`DummyScheduler`) to ``prepare`` so the usual loop
stays the same. They hold what DeepSpeed needs (parameters, learning rate, steps) and nothing else.

Unlike Accelerate's plain classes, they are a ``torch.optim.Optimizer`` and an ``LRScheduler``:
``Accelerator.prepare`` recognises objects by those types, so this is how they reach the DeepSpeed
strategy, which replaces them by the engine's optimizer and scheduler. Stepping one anywhere else
(another strategy, or outside ``prepare``) is an error that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

#: Parameters as an optimizer takes them: tensors, or parameter groups (dicts with ``"params"``).
Params = Iterable[torch.Tensor] | Iterable[dict[str, Any]]


def _not_an_engine(what: str) -> RuntimeError:
    return RuntimeError(
        f"{what} stands in for the one of the DeepSpeed config and never steps itself: prepare it "
        "with the deepspeed strategy (Accelerator(deepspeed_plugin=...)), which replaces it by the "
        "engine's. With another strategy, use a torch optimizer and scheduler."
    )


class DummyOptim(torch.optim.Optimizer):
    """The model's parameters (or parameter groups) for the optimizer of the DeepSpeed config.

    Args:
        params: parameters or parameter groups to optimize (kept in :attr:`params`).
        lr: learning rate (fills ``"auto"`` in the config's optimizer).
        weight_decay: weight decay (fills ``"auto"`` too).
        **kwargs: other optimizer arguments, kept in :attr:`kwargs`.
    """

    def __init__(
        self, params: Params, lr: float = 0.001, weight_decay: float = 0, **kwargs: object
    ) -> None:
        if not isinstance(params, (list, tuple)):
            params = list(params)  # a generator would be used up by torch's Optimizer
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs

    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """Always an error: the DeepSpeed engine steps the optimizer it built instead."""
        raise _not_an_engine("DummyOptim")


class DummyScheduler(torch.optim.lr_scheduler.LRScheduler):
    """The learning-rate schedule of the DeepSpeed config, with the steps it needs.

    It holds its arguments only (torch's scheduler set-up does not run: the optimizer is left
    untouched); the DeepSpeed strategy builds the real schedule.

    Args:
        optimizer: the (dummy) optimizer the schedule drives.
        total_num_steps: total training steps (fills ``"auto"`` in the config's scheduler).
        warmup_num_steps: warm-up steps.
        lr_scheduler_callable: builds a scheduler from the optimizer DeepSpeed creates, when the
            config has no ``scheduler`` section.
        **kwargs: other scheduler arguments, kept in :attr:`kwargs`.
    """

    def __init__(  # torch's set-up is skipped on purpose: it would edit the optimizer's groups
        self,
        optimizer: DummyOptim | torch.optim.Optimizer,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        lr_scheduler_callable: Callable[[torch.optim.Optimizer], object] | None = None,
        **kwargs: object,
    ) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs

    def step(self, epoch: int | None = None) -> None:
        """Always an error: the DeepSpeed engine steps the schedule it built instead."""
        raise _not_an_engine("DummyScheduler")
