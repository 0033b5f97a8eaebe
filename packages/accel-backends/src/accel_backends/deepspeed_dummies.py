"""Stand-ins for an optimizer and a scheduler that the DeepSpeed config file defines.

When the config has an ``optimizer`` (or ``scheduler``) section, DeepSpeed builds it; the training
script passes a :class:`DummyOptim` (:class:`DummyScheduler`) to ``prepare`` so the usual loop
stays the same. They hold what DeepSpeed needs (parameters, learning rate, steps) and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

#: Parameters as an optimizer takes them: tensors, or parameter groups (dicts with ``"params"``).
Params = Iterable[torch.Tensor] | Iterable[dict[str, Any]]


class DummyOptim:
    """The model's parameters (or parameter groups) for the optimizer of the DeepSpeed config.

    Args:
        params: parameters or parameter groups to optimize.
        lr: learning rate (fills ``"auto"`` in the config's optimizer).
        weight_decay: weight decay (fills ``"auto"`` too).
        **kwargs: other optimizer arguments, kept in :attr:`kwargs`.
    """

    def __init__(
        self, params: Params, lr: float = 0.001, weight_decay: float = 0, **kwargs: object
    ) -> None:
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """The learning-rate schedule of the DeepSpeed config, with the steps it needs.

    Args:
        optimizer: the (dummy) optimizer the schedule drives.
        total_num_steps: total training steps (fills ``"auto"`` in the config's scheduler).
        warmup_num_steps: warm-up steps.
        lr_scheduler_callable: builds a scheduler from the optimizer DeepSpeed creates, when the
            config has no ``scheduler`` section.
        **kwargs: other scheduler arguments, kept in :attr:`kwargs`.
    """

    def __init__(
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
