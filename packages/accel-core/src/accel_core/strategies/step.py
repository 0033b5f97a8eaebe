"""The pieces of one training step that ``Accelerator.backward`` and
:meth:`Strategy.forward_backward <accel_core.strategies.base.Strategy.forward_backward>` share:
how a batch's inputs reach the model, and the loss that backward receives under accumulation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

#: ``loss_fn(outputs, target) -> loss``: the model's outputs of a batch (or of one micro-batch,
#: under a pipeline schedule) and the matching target (None when none was given).
LossFunction = Callable[[Any, Any], torch.Tensor]


def call_model(model: torch.nn.Module, inputs: object) -> object:
    """``model`` on ``inputs``: a mapping as keyword arguments (``model(**batch)``, Hugging
    Face's way), a tuple as positional arguments, anything else as the one argument."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def loss_to_backward(
    loss: torch.Tensor, accumulation_steps: int, handles_accumulation: bool
) -> torch.Tensor:
    """The loss a strategy's ``backward`` receives: divided by the accumulation steps, unless
    the engine divides it itself (``handles_accumulation``, DeepSpeed); not scaled (the
    strategy's precision scales it)."""
    if accumulation_steps > 1 and not handles_accumulation:
        return loss / accumulation_steps
    return loss
