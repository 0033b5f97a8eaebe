"""Train a small classifier on scikit-learn's bundled digits (8x8 images, 10 classes) and evaluate
it on every process with ``gather_for_metrics``.

The training loop is the quicktour's: create the objects, ``accelerator.prepare`` them, replace
``loss.backward()`` with ``accelerator.backward(loss)``. Run it on any number of processes:

    python examples/train_digits.py
    accel launch --num_processes 2 examples/train_digits.py
    python -m torch.distributed.run --nproc_per_node 2 examples/train_digits.py

Needs scikit-learn (``pip install accel-core[examples]``); the data ships with it, nothing is
downloaded. Prints the test accuracy on the main process.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.utils import set_seed


def load_data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The digits as (train, test) tensor datasets: pixels scaled to [0, 1], 80/20 split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    # The same permutation on every process: it depends only on the seed.
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    test, train = order[: len(y) // 5], order[len(y) // 5 :]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    accelerator = Accelerator()
    set_seed(args.seed)
    train_set, test_set = load_data(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    train_dataloader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_dataloader = DataLoader(test_set, batch_size=64)
    # Written for one process: the prepared scheduler steps once per process per optimizer step.
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs * len(train_dataloader)
    )
    loss_function = torch.nn.CrossEntropyLoss()

    model, optimizer, train_dataloader, test_dataloader, scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, test_dataloader, scheduler
    )

    start = time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        for batch in train_dataloader:
            optimizer.zero_grad()
            inputs, targets = batch
            outputs = model(inputs)
            loss = loss_function(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
        if epoch % 5 == 4:
            accelerator.print(f"epoch {epoch + 1}: loss {loss.item():.4f}")
    train_seconds = time.perf_counter() - start

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, targets in test_dataloader:
            predictions = model(inputs).argmax(dim=-1)
            predictions, targets = accelerator.gather_for_metrics((predictions, targets))
            correct += int((predictions == targets).sum())
            total += targets.numel()
    accelerator.print(
        f"accuracy {correct / total:.4f} on {total} test digits "
        f"(processes: {accelerator.num_processes}, training {train_seconds:.1f}s)"
    )
    accelerator.end_training()


if __name__ == "__main__":
    main()
