"""The training check: a few steps under ``Accelerator`` must equal a plain single-process run.

Every rank trains under the Accelerator on its shard of the global batch
(:func:`accelerated_run`), and also computes, locally, the plain PyTorch run on the whole global
batch (:func:`reference_run`). :func:`check_training` passes when the loss falls at every step
and the losses and weights of both runs agree within ATOL + RTOL * |expected|.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from accel_launch.selfcheck.checks import CheckFailed, Job, expect_equal

if TYPE_CHECKING:
    from accel_core import Accelerator

# The training problem: y = x @ W_TRUE + 0.25 on PER_PROCESS_BATCH * world fixed samples (the
# global batch, the same at each of STEPS steps), a 4-1 linear model, plain SGD on the mean
# squared error. LR times the largest eigenvalue of the loss's Hessian is 0.36-0.53 for 1 to 8
# processes (below 2, so gradient descent on this quadratic lowers the loss at every step).
STEPS = 4
PER_PROCESS_BATCH = 4
LR = 0.1
W_TRUE = ((1.0,), (-2.0,), (0.5,), (3.0,))
# DDP sums the same per-sample gradient terms as the single-process run but in another order (per
# rank, then across ranks, then divided by the world size), so float32 rounding may differ by a
# few ulps at each step: well under 1e-6 on the weights (of order 1; float32's epsilon is 1.2e-7)
# and on the losses (below 40) relative to their size. A rank that trained on the wrong shard, a
# missing gradient average or a skipped step moves the weights by more than 1e-2.
ATOL = 1e-6
RTOL = 1e-6


def training_data(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of the training check: ``PER_PROCESS_BATCH * world`` fixed samples."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(PER_PROCESS_BATCH * world, len(W_TRUE), generator=generator)
    return x, x @ torch.tensor(W_TRUE) + 0.25


def fresh_model() -> torch.nn.Linear:
    """The training check's model, with the same initial weights on every rank and every run."""
    generator = torch.Generator().manual_seed(1)
    model = torch.nn.Linear(len(W_TRUE), 1)
    with torch.no_grad():
        model.weight.copy_(0.5 * torch.randn(1, len(W_TRUE), generator=generator))
        model.bias.zero_()
    return model


def reference_run(world: int, device: torch.device) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Plain PyTorch, one process: STEPS steps on the whole global batch. Losses and weights."""
    x, y = (t.to(device) for t in training_data(world))
    model = fresh_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def accelerated_run(accelerator: Accelerator) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The same steps under ``accelerator``, the global batch sharded by the prepared loader.

    The data set holds the global batch STEPS times; the prepared loader gives process ``r`` batch
    ``k * world + r`` of PER_PROCESS_BATCH samples, so step ``k`` covers the global batch once.
    Returns the global loss of each step (the mean of the per-process losses) and the weights.
    """
    world = accelerator.num_processes
    x, y = training_data(world)
    data = torch.utils.data.TensorDataset(x.repeat(STEPS, 1), y.repeat(STEPS, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=PER_PROCESS_BATCH)
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    try:
        expect_equal("batches per process of the prepared loader", STEPS, len(loader))
        losses = []
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(accelerator.reduce(loss.detach(), "mean").item()))
        state = accelerator.unwrap_model(model).state_dict()
        return losses, {k: v.detach().cpu() for k, v in state.items()}
    finally:
        accelerator.free_memory()


def compare_weights(got: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> float:
    """The largest difference between ``got`` and ``expected``; CheckFailed beyond ATOL/RTOL."""
    expect_equal("weight names", sorted(expected), sorted(got))
    for name in expected:
        try:
            torch.testing.assert_close(got[name], expected[name], rtol=RTOL, atol=ATOL)
        except AssertionError:
            difference = float((got[name] - expected[name]).abs().max())
            raise CheckFailed(
                f"{name!r} after {STEPS} steps vs the single-process run "
                f"(max diff {difference:.1e}, tolerance {ATOL:g} + {RTOL:g} * |expected|)",
                expected[name].tolist(),
                got[name].tolist(),
            ) from None
    return max(float((got[k] - expected[k]).abs().max()) for k in expected)


def check_training(job: Job, accelerator: Accelerator) -> str:
    """Train under ``accelerator`` and against the reference; what was compared, or CheckFailed."""
    expect_equal("Accelerator.num_processes", job.world, accelerator.num_processes)
    losses, weights = accelerated_run(accelerator)
    ref_losses, ref_weights = reference_run(job.world, accelerator.device)
    if job.perturb_reference:
        ref_weights = {k: v + job.perturb_reference for k, v in ref_weights.items()}
    falls = all(after < before for before, after in itertools.pairwise(losses))
    if not falls:
        raise CheckFailed("the loss of each step", "lower than the step before", losses)
    try:
        torch.testing.assert_close(
            torch.tensor(losses), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL
        )
    except AssertionError:
        raise CheckFailed("the losses vs the single-process run", ref_losses, losses) from None
    difference = compare_weights(weights, ref_weights)
    return (
        f"{STEPS} steps on {job.world} process{'es' if job.world > 1 else ''}, loss "
        f"{losses[0]:.2f} -> {losses[-1]:.2f} (falls), losses and weights equal a "
        f"single-process run (max diff {difference:.1e})"
    )
