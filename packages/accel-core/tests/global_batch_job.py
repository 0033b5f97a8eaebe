"""A run whose optimizer steps each take the same 8 samples on any number of processes, for the
keep_global_batch tests (run through accel_testing.run_workers).

An MLP without dropout in float64, a shuffled dataset of 64 samples (seedable sampler), AdamW and
a StepLR scheduler, 2 epochs of 8 optimizer steps. The main process writes ``RESULT`` (a torch
file): the loss of every optimizer step it ran (the mean over the step's samples, summed over the
processes), the final weights, the accumulation steps and learning rate it ended with.

Usage: global_batch_job.py RESULT --accumulation A --batch B [--save-at N ...] [--resume-from CK]
[--keep] [--expect-refusal]

``--save-at N`` saves ``<RESULT's folder>/ck_<N>`` after optimizer step N (and goes on).
``--resume-from CK --keep`` loads CK with ``ProjectConfiguration(keep_global_batch=True)`` and
continues. ``--expect-refusal`` loads CK, expects a CheckpointError and records its message and
whether anything changed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed
from accel_core.checkpointing.errors import CheckpointError

EPOCHS = 2
SAMPLES = 64


class StepCounter:
    """Registered for checkpointing: optimizer steps over the whole run."""

    def __init__(self) -> None:
        self.steps = 0

    def state_dict(self) -> dict[str, int]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.steps = state["steps"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("result")
    parser.add_argument("--accumulation", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--save-at", type=int, nargs="*", default=[])
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--expect-refusal", action="store_true")
    args = parser.parse_args()
    result = Path(args.result)

    set_seed(0)
    accelerator = Accelerator(
        gradient_accumulation_steps=args.accumulation,
        project_config=ProjectConfiguration(keep_global_batch=args.keep),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=11),
    )
    data = torch.Generator().manual_seed(3)
    inputs = torch.randn(SAMPLES, 6, generator=data, dtype=torch.float64)
    targets = torch.randn(SAMPLES, 1, generator=data, dtype=torch.float64)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=12, gamma=0.5)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=args.batch, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = StepCounter()
    accelerator.register_for_checkpointing(counter)

    if args.expect_refusal:
        refuse(accelerator, model, loader, scheduler, args.resume_from, result)
        return
    skip = 0
    if args.resume_from:
        accelerator.load_state(args.resume_from)
        resume = loader.progress.resume
        skip = resume.batches if resume is not None else 0
    losses: dict[int, float] = {}
    squared, samples = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    for _epoch in range(loader.iteration, EPOCHS):
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for x, y in batches:
            with accelerator.accumulate(model):
                prediction = model(x)
                squared += ((prediction - y) ** 2).sum().detach()
                samples += len(x)
                accelerator.backward(torch.nn.functional.mse_loss(prediction, y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                counter.steps += 1
                total = accelerator.reduce(torch.stack([squared, samples]), reduction="sum")
                losses[counter.steps] = (total[0] / total[1]).item()
                squared.zero_()
                samples.zero_()
                if counter.steps in args.save_at:
                    accelerator.save_state(result.parent / f"ck_{counter.steps}")
    if accelerator.is_main_process:
        torch.save(
            {
                "losses": losses,
                "weights": torch.cat([p.detach().flatten() for p in model.parameters()]),
                "accumulation": accelerator.gradient_accumulation_steps,
                "lr": scheduler.get_last_lr()[0],
                "steps": counter.steps,
            },
            result,
        )
    accelerator.end_training()


def refuse(accelerator, model, loader, scheduler, checkpoint: str, result: Path) -> None:
    """Load ``checkpoint``, expecting a refusal; record its message and what changed."""

    def observe() -> dict:
        return {
            "weights": torch.cat([p.detach().flatten().clone() for p in model.parameters()]),
            "rng": torch.get_rng_state(),
            "step": accelerator.step,
            "accumulation": accelerator.gradient_accumulation_steps,
            "epoch": loader.iteration,
            "resume": loader.progress.resume,
            "scheduler": scheduler.state_dict()["last_epoch"],
        }

    before = observe()
    try:
        accelerator.load_state(checkpoint)
    except CheckpointError as caught:
        message = str(caught)
    else:
        message = None
    after = observe()
    unchanged = all(
        torch.equal(before[k], after[k])
        if isinstance(before[k], torch.Tensor)
        else before[k] == after[k]
        for k in before
    )
    if accelerator.is_main_process:
        torch.save({"message": message, "unchanged": unchanged}, result)
    accelerator.end_training()


if __name__ == "__main__":
    main()
