"""A training run that checkpoints, can kill itself with SIGKILL, and resumes from its latest
checkpoint. Run as a script by the resumption tests (through accel_testing.run_workers).

The model has dropout, the loader shuffles through the seedable sampler (or a synchronised
generator), gradients accumulate over 2 batches and a scheduler steps: everything a resumed run
must restore exactly. ``--die-after K`` kills every process with SIGKILL right after batch K
(counted over the whole run, resumed or not). ``--resume`` loads the latest checkpoint and
continues mid-epoch: through skip_first_batches, or by itself with ``--stateful``. ``--dispatch``
reads the batches on the main process (DataLoaderDispatcher) instead of sharding them. At the end
the main process writes the final parameters to ``<project>/final_weights.pt``.

Usage: resumable_job.py PROJECT [--die-after K] [--resume] [--stateful] [--dispatch] [--every N]
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed

EPOCHS = 3
SAMPLES = 60
BATCH = 4


class Counter:
    """A registered custom object: batches seen over the whole run."""

    def __init__(self) -> None:
        self.batches = 0

    def state_dict(self) -> dict[str, int]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batches = state["batches"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project")
    parser.add_argument("--die-after", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--stateful", action="store_true")
    parser.add_argument("--dispatch", action="store_true")
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--seedable", type=int, default=1)
    args = parser.parse_args()

    set_seed(0)
    accelerator = Accelerator(
        gradient_accumulation_steps=2,
        project_config=ProjectConfiguration(
            project_dir=args.project, automatic_checkpoint_naming=True, total_limit=2
        ),
        dataloader_config=DataLoaderConfiguration(
            use_seedable_sampler=bool(args.seedable),
            use_stateful_dataloader=args.stateful,
            dispatch_batches=args.dispatch,
        ),
    )
    data = torch.Generator().manual_seed(3)
    dataset = TensorDataset(torch.randn(SAMPLES, 6, generator=data), torch.randn(SAMPLES, 1))
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.25), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)

    skip = 0
    if args.resume:
        accelerator.load_state()
        resume = loader.progress.resume
        skip = resume.batches if resume is not None and not args.stateful else 0
    for _epoch in range(loader.iteration, EPOCHS):
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for x, y in batches:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            counter.batches += 1
            if counter.batches % args.every == 0:
                accelerator.save_state()
            if counter.batches == args.die_after:
                os.kill(os.getpid(), signal.SIGKILL)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        torch.save(
            {"weights": weights, "batches": counter.batches, "step": accelerator.step},
            Path(args.project) / "final_weights.pt",
        )
    accelerator.end_training()


if __name__ == "__main__":
    main()
