"""The fault benchmarks' job (``bench_faults.py``), for accel, Hugging Face Accelerate and raw
PyTorch: a DDP MLP on 2 CPU processes that writes a timestamp per step.

    python faults_job.py IMPL FOLDER --hidden H --layers L --steps N [--save-at S] [--signal-at S]
                                     [--kill-launcher-at S] [--resume]

IMPL is ``accel``, ``accelerate`` or ``raw`` (a hand-written torch DDP loop; no checkpoints).
Each rank appends ``step attempt time`` lines to ``FOLDER/steps_<rank>.log``. ``--save-at S``
times a plain ``save_state()`` at step S (``FOLDER/save_seconds``); ``--signal-at S`` makes rank 0
record the time and send SIGTERM to its launcher (``ACCEL_LAUNCHER_PID``, or the parent of
the agent for Accelerate, through ``LAUNCHER_PID`` set by the benchmark); ``--kill-launcher-at``
does the same with SIGKILL from the machine whose launcher has ``LOSE_THIS_MACHINE=1``, once
per folder (a lost machine). ``--resume`` loads the
latest checkpoint at start (accel and Accelerate).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset


def build(hidden: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.Tanh()]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(hidden, 1))


def data(hidden: int, steps: int, batch: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    count = steps * batch * 2  # 2 processes
    features = torch.randn(count, hidden, generator=generator)
    return TensorDataset(features, features[:, :1].clone())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("impl", choices=["accel", "accelerate", "raw"])
    parser.add_argument("folder")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--save-at", type=int, default=-1)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--signal-at", type=int, default=-1)
    parser.add_argument("--kill-launcher-at", type=int, default=-1)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = build(args.hidden, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(data(args.hidden, args.steps, args.batch), batch_size=args.batch)
    if args.impl == "raw":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)
        sampler = torch.utils.data.DistributedSampler(loader.dataset, shuffle=False)
        loader = DataLoader(loader.dataset, batch_size=args.batch, sampler=sampler)
        backward = torch.Tensor.backward
        accelerator = None
    else:
        if args.impl == "accel":
            from accel_core import Accelerator, ProjectConfiguration
        else:
            from accelerate import Accelerator
            from accelerate.utils import ProjectConfiguration
        config = ProjectConfiguration(project_dir=str(folder), automatic_checkpoint_naming=True)
        accelerator = Accelerator(project_config=config, cpu=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        rank = accelerator.process_index
        backward = accelerator.backward
    start_step = 0
    if args.resume and accelerator is not None and (folder / "checkpoints").is_dir():
        accelerator.load_state()
        start_step = int((folder / "checkpoint_step").read_text())
        loader = accelerator.skip_first_batches(loader, start_step)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    log = (folder / f"steps_{rank}.log").open("a")
    launcher = int(os.environ.get("LAUNCHER_PID") or os.environ.get("ACCEL_LAUNCHER_PID", "0"))
    step = start_step
    for inputs, labels in loader:
        if step == args.signal_at and rank == 0:
            (folder / "signal_time").write_text(repr(time.time()))
            os.kill(launcher, signal.SIGTERM)
        lost = folder / "lost_time"
        here = os.environ.get("LOSE_THIS_MACHINE") == "1"  # c10d deals ranks in join order
        if step == args.kill_launcher_at and here and not lost.exists():
            lost.write_text(repr(time.time()))
            os.kill(launcher, signal.SIGKILL)
        loss = torch.nn.functional.mse_loss(model(inputs), labels)
        backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        log.write(f"{step} {attempt} {time.time()!r}\n")
        log.flush()
        if accelerator is not None and (
            step == args.save_at or (args.save_every and step % args.save_every == 0)
        ):
            started = time.perf_counter()
            accelerator.save_state()
            if rank == 0:
                (folder / "save_seconds").write_text(repr(time.perf_counter() - started))
                (folder / "checkpoint_step").write_text(str(step))


if __name__ == "__main__":
    main()
