"""The job of the checkpoint-compatibility test, in plain torch and numpy.

Both workers run it: ``accelerate_checkpoint_job.py`` (Hugging Face Accelerate's interpreter) and
``accel_checkpoint_job.py`` (ours) pass their library's ``Accelerator`` to :func:`main`, so the two
libraries train, save and load exactly the same objects::

    python JOB RECORDS NAME --seed N [--load CHECKPOINT] [--save CHECKPOINT]

(one process, or under a launcher). The job seeds (``N`` + rank), builds and prepares the
objects; with ``--load`` it calls ``load_state`` and records what it got, then the numbers the
generators draw next; with ``--save`` it trains (one epoch and a few batches), records the states,
calls ``save_state`` and records the numbers drawn right after it. Each rank writes
``RECORDS/NAME_<rank>.pt`` (plain dicts, tensors, ints and floats), which
``integration-tests/test_accelerate_checkpoints.py`` compares.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

SAMPLES, FEATURES, BATCH = 32, 4, 4
#: ``data_seed`` of the seedable sampler in a job that saves (a job that only loads sets none).
DATA_SEED = 1234
#: The epoch of the ``sampler.bin`` the Accelerate job pickles.
SAMPLER_EPOCH = 5
#: Batches trained in the second epoch before saving (the checkpoint is taken mid-epoch).
PARTIAL_EPOCH_BATCHES = 3


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 8),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.25),
            torch.nn.Linear(8, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BatchCounter:
    """The registered custom object: batches trained and the learning rate of each."""

    def __init__(self) -> None:
        self.batches = 0
        self.lrs = torch.zeros(0)

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "lrs": self.lrs.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])
        self.lrs = state["lrs"].clone()


@dataclass
class Parts:
    model: Any
    optimizer: Any
    loader: Any
    scheduler: Any
    counter: BatchCounter


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build(accelerator: Any, seed: int) -> Parts:
    """Seed (differently on each rank), build, prepare and register the objects."""
    # Each rank gets its own random streams, so that loading random_states_<rank>.pkl into the
    # right rank is what the test checks; DDP broadcasts rank 0's initial weights.
    seed_everything(seed + accelerator.process_index)
    data = torch.Generator().manual_seed(0)
    features = torch.randn(SAMPLES, FEATURES, generator=data)
    targets = features.sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(features, targets), batch_size=BATCH, shuffle=True)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    counter = BatchCounter()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    accelerator.register_for_checkpointing(counter)
    return Parts(model, optimizer, loader, scheduler, counter)


def train(accelerator: Any, parts: Parts) -> None:
    """One full epoch, then PARTIAL_EPOCH_BATCHES batches of the next one."""
    parts.model.train()
    for limit in (None, PARTIAL_EPOCH_BATCHES):
        for number, (x, y) in enumerate(parts.loader):
            # Augmentation that draws from python's and numpy's generators as well as torch's.
            noise = torch.from_numpy(np.random.randn(*x.shape)).float()
            x = x + (noise + random.random()) * 1e-3
            with accelerator.accumulate(parts.model):
                loss = torch.nn.functional.mse_loss(parts.model(x), y)
                accelerator.backward(loss)
                parts.optimizer.step()
                parts.scheduler.step()
                parts.optimizer.zero_grad()
            parts.counter.batches += 1
            lr = torch.tensor([parts.optimizer.param_groups[0]["lr"]])
            parts.counter.lrs = torch.cat([parts.counter.lrs, lr])
            if limit is not None and number + 1 == limit:
                break


def snapshot(accelerator: Any, parts: Parts) -> dict[str, Any]:
    """Everything a checkpoint restores, as copies (this consumes no random numbers)."""
    model = getattr(parts.model, "module", parts.model)
    sampler = parts.loader.get_sampler()
    return {
        "model": {key: value.detach().clone() for key, value in model.state_dict().items()},
        "optimizer": _copied(parts.optimizer.state_dict()),
        "scheduler": _copied(parts.scheduler.state_dict()),
        "custom": parts.counter.state_dict(),
        "step": int(accelerator.step),
        "sampler": {"epoch": int(sampler.epoch), "initial_seed": int(sampler.initial_seed)},
    }


def draws() -> dict[str, Any]:
    """The next numbers of the torch, python and numpy generators (in this order)."""
    return {
        "torch": torch.rand(4),
        "python": [random.random() for _ in range(2)],
        "numpy": np.random.rand(3).tolist(),
    }


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(item) for item in value)
    return value


Hook = Callable[[Any, Parts, Path], dict[str, Any]]


def main(
    accelerator_class: type,
    config_class: type,
    after_load: Hook | None = None,
    after_save: Hook | None = None,
) -> None:
    """Run the job with one library. ``after_load(accelerator, parts, checkpoint)`` and
    ``after_save(accelerator, parts, records)`` add library-specific entries to the record; they
    run after the random numbers are drawn."""
    parser = argparse.ArgumentParser()
    parser.add_argument("records", type=Path)
    parser.add_argument("name")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--load", type=Path)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    # The saving side fixes the sampler's seed; a side that only loads leaves it to torch.
    config = config_class(
        use_seedable_sampler=True, data_seed=DATA_SEED if args.save is not None else None
    )
    accelerator = accelerator_class(cpu=True, dataloader_config=config)
    parts = build(accelerator, args.seed)
    record: dict[str, Any] = {"world_size": accelerator.num_processes}
    if args.load is not None:
        before = snapshot(accelerator, parts)
        accelerator.load_state(str(args.load))
        loaded = {**snapshot(accelerator, parts), "draws": draws(), "before": before}
        if after_load is not None:
            loaded.update(after_load(accelerator, parts, args.load))
        record["loaded"] = loaded
    if args.save is not None:
        train(accelerator, parts)
        saved = snapshot(accelerator, parts)
        accelerator.save_state(str(args.save))
        saved["draws"] = draws()
        if after_save is not None:
            saved.update(after_save(accelerator, parts, args.records))
        record["saved"] = saved
    torch.save(record, args.records / f"{args.name}_{accelerator.process_index}.pt")
    accelerator.wait_for_everyone()
    accelerator.end_training()
