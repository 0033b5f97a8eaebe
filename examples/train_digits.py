"""Train a small classifier on scikit-learn's bundled digits (8x8 images, 10 classes) and evaluate
it on every process with ``gather_for_metrics``; optionally checkpoint, resume, and log.

The training loop is the quicktour's: create the objects, ``accelerator.prepare`` them, replace
``loss.backward()`` with ``accelerator.backward(loss)``. Run it on any number of processes:

    python examples/train_digits.py
    accel launch --num_processes 2 examples/train_digits.py
    python -m torch.distributed.run --nproc_per_node 2 examples/train_digits.py

With ``--project-dir DIR`` the run logs to JSON lines and TensorBoard under ``DIR/train_digits/``
(TensorBoard only when it is installed). ``--checkpoint-every N`` saves the whole training state
every N optimizer steps into ``DIR/checkpoints/checkpoint_<n>`` (the latest 3 are kept), and
``--resume-from latest`` (or a checkpoint folder) continues an interrupted run exactly where that
checkpoint left it, mid-epoch included, so it ends with the same weights as a run never stopped:

    accel launch --num_processes 2 examples/train_digits.py --project-dir runs/digits \
        --checkpoint-every 40
    accel launch --num_processes 2 examples/train_digits.py --project-dir runs/digits \
        --checkpoint-every 40 --resume-from latest

Needs scikit-learn (``pip install accel-core[examples]``); the data ships with it, nothing is
downloaded. Prints the test accuracy on the main process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.utils import ProjectConfiguration, set_seed

PROJECT_NAME = "train_digits"


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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--project-dir", help="folder of the run's checkpoints and logs (logging needs it)"
    )
    parser.add_argument(
        "--checkpoint-every", type=int, metavar="N", help="save_state every N optimizer steps"
    )
    parser.add_argument(
        "--resume-from",
        metavar="PATH|latest",
        help="load_state from a checkpoint folder, or the latest one of --project-dir",
    )
    parser.add_argument(
        "--save-model", metavar="DIR", help="save the trained weights with save_model"
    )
    parser.add_argument(
        "--die-after-step",
        type=int,
        metavar="K",
        help="kill the main process with SIGKILL after optimizer step K (to test resuming)",
    )
    args = parser.parse_args()
    if args.project_dir is None and (args.checkpoint_every or args.resume_from == "latest"):
        parser.error("--checkpoint-every and --resume-from latest need --project-dir")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        parser.error(f"--checkpoint-every must be at least 1, got {args.checkpoint_every}")
    return args


def trackers(project_dir: str | None) -> list[str]:
    """JSON lines always (with a project folder); TensorBoard too when it is installed."""
    if project_dir is None:
        return []
    if importlib.util.find_spec("tensorboard") is None:
        return ["jsonl"]
    return ["jsonl", "tensorboard"]


def main() -> None:
    args = parse_args()
    log_with = trackers(args.project_dir)
    accelerator = Accelerator(
        log_with=log_with,
        project_config=ProjectConfiguration(
            project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=3
        ),
    )
    if args.project_dir is not None and "tensorboard" not in log_with:
        accelerator.print(
            "tensorboard is not installed: logging to JSON lines only "
            '(pip install "accel-core[tensorboard]" to add TensorBoard)'
        )
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

    # Resuming: load_state restores the weights, the optimizer, the scheduler, the random states
    # and where the loader stands (its epoch, and the batches of that epoch already done).
    steps_per_epoch = len(train_dataloader)
    first_epoch = skip = 0
    if args.resume_from is not None:
        if args.resume_from == "latest":
            accelerator.load_state()
            source = f"checkpoint_{accelerator.save_iteration - 1}"
        else:
            accelerator.load_state(args.resume_from)
            source = args.resume_from
        first_epoch = train_dataloader.iteration
        resume = train_dataloader.progress.resume
        skip = resume.batches if resume is not None else 0
        accelerator.print(
            f"resumed from {source}: epoch {first_epoch + 1}, after {skip} of its "
            f"{steps_per_epoch} steps"
        )
    completed_steps = first_epoch * steps_per_epoch + skip
    # After load_state, so that a resumed run appends to the run it continues.
    accelerator.init_trackers(PROJECT_NAME, config=vars(args))

    start = time.perf_counter()
    model.train()
    for epoch in range(first_epoch, args.epochs):
        # The interrupted epoch continues after its first `skip` batches; later ones are whole.
        batches = train_dataloader
        if skip:
            batches = accelerator.skip_first_batches(train_dataloader, skip)
        skip = 0
        for batch in batches:
            optimizer.zero_grad()
            inputs, targets = batch
            outputs = model(inputs)
            loss = loss_function(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            completed_steps += 1
            if completed_steps % 10 == 0:
                accelerator.log(
                    {"train/loss": loss.item(), "train/lr": scheduler.get_last_lr()[0]},
                    step=completed_steps,
                )
            if args.checkpoint_every and completed_steps % args.checkpoint_every == 0:
                accelerator.save_state()
            if completed_steps == args.die_after_step and accelerator.is_main_process:
                accelerator.print(f"step {completed_steps}: killing the main process (SIGKILL)")
                os.kill(os.getpid(), signal.SIGKILL)
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
    accelerator.log({"test/accuracy": correct / total}, step=completed_steps)
    accelerator.print(
        f"accuracy {correct / total:.4f} on {total} test digits "
        f"(processes: {accelerator.num_processes}, training {train_seconds:.1f}s)"
    )
    if args.save_model is not None:
        accelerator.save_model(model, args.save_model)
    accelerator.end_training()


if __name__ == "__main__":
    main()
