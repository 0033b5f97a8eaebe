"""What the XLA tests share: a fresh Accelerator on the ``xla`` strategy, a model, a data set, and
the same training done by plain PyTorch on CPU.

Importing this module imports no torch_xla; the test modules skip first when it is missing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

LEARNING_RATE = 0.01
SAMPLES, FEATURES, OUTPUTS = 32, 4, 3

#: XLA's CPU device against eager PyTorch on CPU, float32: XLA compiles each step into fused
#: kernels whose additions run in another order (and may use fused multiply-adds), so results
#: differ by rounding only. Measured after 24 AdamW steps: 1.8e-7 at most on weights of size
#: about 0.5 (1.5 ulp at 1.0). 2e-6 is about 17 ulp at 1.0; a wrong step (a missed update, a
#: wrong learning rate, gradients not averaged over an accumulated batch) moves weights by
#: more than 1e-3.
ATOL = 2e-6


@contextmanager
def xla_accelerator(**kwargs: Any) -> Iterator[Any]:
    """An ``Accelerator`` on a new ``XLAStrategy`` (``strategy_options`` go to the strategy),
    with the process-wide training state forgotten afterwards."""
    from accel_backends.xla.strategy import XLAStrategy
    from accel_core import Accelerator
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    options = kwargs.pop("strategy_options", {})
    try:
        yield Accelerator(strategy=XLAStrategy(**options), **kwargs)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


def make_model(seed: int = 0, dropout: float = 0.0) -> torch.nn.Module:
    """A small MLP, the same for a given seed."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = [torch.nn.Linear(FEATURES, 16), torch.nn.Tanh()]
    if dropout:
        layers.append(torch.nn.Dropout(dropout))
    layers.append(torch.nn.Linear(16, OUTPUTS))
    return torch.nn.Sequential(*layers)


def make_dataset(seed: int = 1, samples: int = SAMPLES) -> torch.utils.data.TensorDataset:
    """Inputs and targets, the same for a given seed."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, FEATURES, generator=generator)
    targets = torch.randn(samples, OUTPUTS, generator=generator)
    return torch.utils.data.TensorDataset(inputs, targets)


def loss_of(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Mean squared error of the model on one batch."""
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


def plain_training(
    model: torch.nn.Module,
    dataset: torch.utils.data.Dataset,
    *,
    batch_size: int,
    epochs: int = 1,
    accumulation: int = 1,
    clip: float | None = None,
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """A copy of ``model`` trained on CPU by plain PyTorch (AdamW); its weights and losses.

    With ``accumulation`` the loss of each batch is divided by it and the optimizer steps every
    ``accumulation`` batches and on the last batch of each epoch, as ``accelerator.accumulate``
    does by default.
    """
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
    losses = []
    for _ in range(epochs):
        for index, batch in enumerate(loader):
            loss = loss_of(model, batch)
            losses.append(float(loss.detach()))
            (loss / accumulation).backward()
            if (index + 1) % accumulation == 0 or index + 1 == len(loader):
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


def accelerated_training(
    accelerator: Any,
    model: torch.nn.Module,
    dataset: torch.utils.data.Dataset,
    *,
    batch_size: int,
    epochs: int = 1,
    clip: float | None = None,
    on_batch: Callable[[Any], None] | None = None,
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The same training through ``accelerator`` (``accumulate``, ``backward``, the prepared
    optimizer's step); the weights from ``get_state_dict`` and the losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            with accelerator.accumulate(model):
                loss = loss_of(model, batch)
                losses.append(float(loss.detach()))
                accelerator.backward(loss)
                if clip is not None and accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
            if on_batch is not None:
                on_batch(batch)
    return accelerator.get_state_dict(model), losses


def assert_weights_close(
    actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], atol: float = ATOL
) -> None:
    """Same keys, and every tensor within ``atol`` (no relative slack)."""
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=0.0, atol=atol, msg=key)
