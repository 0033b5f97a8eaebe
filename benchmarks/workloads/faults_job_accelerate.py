"""Hugging Face Accelerate's twin of ``integration-tests/faults/train_job.py`` (for
``benchmarks/faults_vs_accelerate.py``): the same model, data, seed, step counter and options,
written the way Accelerate's docs teach a user to checkpoint and resume.

- ``ProjectConfiguration(project_dir, automatic_checkpoint_naming=True)``, a registered step
  counter, ``save_state()`` every ``--save-every`` steps, ``load_state()`` at start when a
  checkpoint exists.
- Resuming mid-epoch: after ``load_state()`` the epoch and the batches to skip come from the
  restored step counter (``step // len(loader)``, ``step % len(loader)``), and that epoch
  iterates ``accelerator.skip_first_batches(loader, skip)``.
- ``load_state()`` does not restore the save counter of automatic checkpoint naming: the next
  ``save_state()`` would fail with "Checkpoint directory ... checkpoint_0 ... already exists".
  The script sets ``accelerator.project_configuration.iteration`` past the newest folder, as that
  error message asks a user to do.

Options as in accel's job: ``--die-at STEP`` (rank ``--die-rank`` SIGKILLs itself on the first
attempt), ``--signal-at STEP --signal SIG`` (rank ``--signal-rank`` sends SIG to its launcher,
once per project folder). The launcher is the workers' parent: ``accelerate launch`` runs
torch's elastic agent in its own process (``LAUNCHER_PID`` overrides it). The pid and command
line of the process signalled are written to ``signalled`` in the project folder.

At the end the main process writes ``--result`` (final weights and step counter); every rank
appends ``step attempt`` per step to ``steps_<rank>.log`` in the project folder.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from torch.utils.data import DataLoader, TensorDataset


class StepCounter:
    """The script's own bookkeeping, saved with the checkpoint."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


def _launcher_pid() -> int:
    return int(os.environ.get("LAUNCHER_PID") or os.getppid())


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--die-at", type=int, default=-1)
    parser.add_argument("--die-rank", type=int, default=1)
    parser.add_argument("--signal-at", type=int, default=-1)
    parser.add_argument("--signal-rank", type=int, default=0)
    parser.add_argument("--signal", default="SIGTERM")
    parser.add_argument("--hidden", type=int, default=16)
    args = parser.parse_args()

    Path(args.project).mkdir(parents=True, exist_ok=True)
    config = ProjectConfiguration(project_dir=args.project, automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    set_seed(0)
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(96, 8, generator=generator)
    targets = features @ torch.linspace(-1.0, 1.0, 8) + 0.25
    loader = DataLoader(TensorDataset(features, targets), batch_size=4, shuffle=True)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    counter = StepCounter()
    accelerator.register_for_checkpointing(counter)
    checkpoints = Path(args.project, "checkpoints")
    first_epoch, skip = 0, 0
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        accelerator.load_state()  # the folder with the highest number
        newest = max(int(re.findall(r"\d+", p.name)[-1]) for p in checkpoints.iterdir())
        accelerator.project_configuration.iteration = newest + 1
        first_epoch, skip = divmod(counter.step, len(loader))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    log = Path(args.project, f"steps_{accelerator.process_index}.log")
    once = Path(args.project, "signalled")
    for _epoch in range(first_epoch, args.epochs):
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for inputs, labels in batches:
            dying = attempt == "0" and accelerator.process_index == args.die_rank
            if counter.step == args.die_at and dying:
                os.kill(os.getpid(), signal.SIGKILL)
            signalling = accelerator.process_index == args.signal_rank and not once.exists()
            if counter.step == args.signal_at and signalling:
                target = _launcher_pid()
                once.write_text(f"{target} {_cmdline(target)}\n")
                os.kill(target, signal.Signals[args.signal])
            loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            counter.step += 1
            with log.open("a") as file:
                file.write(f"{counter.step} {attempt}\n")
            if counter.step % args.save_every == 0:
                accelerator.save_state()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        weights = accelerator.unwrap_model(model).state_dict()
        torch.save({"weights": weights, "step": counter.step}, args.result)


if __name__ == "__main__":
    main()
