"""One small training problem, run as plain PyTorch and through the Accelerator.

Used by the single-process tests and by the multi-process workers: both must reach the same
weights. Regression of 96 fixed samples with a 5-8-1 MLP, SGD, mean squared error, no shuffling.

The equivalent single-process run of ``N`` processes is a run whose batch is the global batch:
each process takes whole batches of ``PER_PROCESS_BATCH`` (process ``r`` gets batch ``k*N + r``),
DDP averages the gradients of the ``N`` per-process mean losses, and accumulating ``A`` batches
divides each loss by ``A`` -- together the mean loss over ``PER_PROCESS_BATCH * N * A`` samples.
With ``split_batches`` the loader's batch (``SPLIT_BATCH``) is the global batch.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

N_SAMPLES = 96
PER_PROCESS_BATCH = 4
SPLIT_BATCH = 12
EPOCHS = 2
LR = 0.1
# (split_batches, gradient_accumulation_steps)
CONFIGS = [(False, 1), (False, 2), (True, 1), (True, 2)]


def make_dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N_SAMPLES, 5, generator=generator)
    w = torch.tensor([[0.5], [-1.0], [2.0], [0.0], [1.5]])
    y = x @ w + 0.1 * torch.randn(N_SAMPLES, 1, generator=generator)
    return TensorDataset(x, y)


def make_model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def reference_batch(split_batches: bool, accumulation: int, num_processes: int) -> int:
    """The batch size of the single-process run equivalent to this configuration."""
    base = SPLIT_BATCH if split_batches else PER_PROCESS_BATCH * num_processes
    return base * accumulation


def reference_weights(batch_size: int) -> dict[str, torch.Tensor]:
    """Plain PyTorch: one process, the global batch, mean loss."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = DataLoader(make_dataset(), batch_size=batch_size)
    for _ in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def accelerated_weights(split_batches: bool, accumulation: int) -> dict[str, torch.Tensor]:
    """The same problem through Accelerator.prepare / accumulate / backward."""
    from accel_core import Accelerator, DataLoaderConfiguration

    accelerator = Accelerator(
        dataloader_config=DataLoaderConfiguration(split_batches=split_batches),
        gradient_accumulation_steps=accumulation,
    )
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    batch = SPLIT_BATCH if split_batches else PER_PROCESS_BATCH
    loader = DataLoader(make_dataset(), batch_size=batch)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(EPOCHS):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    state = accelerator.unwrap_model(model).state_dict()
    return {k: v.detach().clone() for k, v in state.items()}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)
