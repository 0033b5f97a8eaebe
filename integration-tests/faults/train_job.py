"""The fault-tolerance tests' training job: a user's script, written as Accelerate's docs teach.

It keeps its checkpoints in ``ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=
True)``, registers its own step counter, calls ``load_state()`` at start when a checkpoint exists,
and saves every ``--save-every`` steps. It resumes mid-epoch as docs/guides/checkpointing.md teaches
(``skip_first_batches``). Nothing in it knows about faults: the tests kill, signal or restart it
from outside, or ask it to do so at a step: ``--die-at STEP`` makes one rank SIGKILL itself on
the first attempt (a worker lost mid-epoch); ``--signal-at STEP`` makes one rank send a signal to
a process named by an environment variable (its launcher, by default), once per job (a file in
the project folder remembers it: a replacement machine starts again at attempt 0), and waits
until the launcher has passed a catchable signal back to it.

At the end the main process writes ``RESULT`` (the final weights and the step counter) and every
rank appends one line per step to ``steps_<rank>.log`` in the project folder (step, attempt), so a
test sees which steps ran on which attempt.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from types import FrameType

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, ProjectConfiguration, set_seed


class StepCounter:
    """The script's own bookkeeping, saved with the checkpoint."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


def _relay_arrival(sent: signal.Signals) -> threading.Event | None:
    """An event set once ``sent`` reaches this process (its handler, accel's, still runs).

    The job waits on it after signalling its launcher, so how many steps run between the signal
    and the stop does not depend on how soon the launcher is scheduled to pass the signal on.
    ``None`` where the signal has no Python handler to relay to (SIGKILL, a default action).
    """
    handler = signal.getsignal(sent)
    if not callable(handler):
        return None
    arrived = threading.Event()

    def relay(signum: int, frame: FrameType | None) -> None:
        signal.signal(sent, handler)
        arrived.set()
        handler(signum, frame)

    signal.signal(sent, relay)
    return arrived


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--die-at", type=int, default=-1)
    parser.add_argument("--die-rank", type=int, default=1)
    parser.add_argument("--signal-at", type=int, default=-1, help="at this step, on attempt 0...")
    parser.add_argument("--signal-rank", type=int, default=0, help="...this rank sends...")
    parser.add_argument(
        "--signal-where",
        default="",
        help="...or the first process of the machine whose launcher "
        "has this environment variable set to 1...",
    )
    parser.add_argument("--signal", default="SIGTERM", help="...this signal...")
    parser.add_argument(
        "--signal-pid-from", default="ACCEL_LAUNCHER_PID", help="...to this pid (or self)"
    )
    parser.add_argument(
        "--signal-again-during-save",
        action="store_true",
        help="send the signal a second time from inside the next save_state",
    )
    parser.add_argument("--no-load", action="store_true", help="do not call load_state()")
    parser.add_argument("--no-project", action="store_true", help="no ProjectConfiguration")
    parser.add_argument("--hidden", type=int, default=16)
    args = parser.parse_args()

    Path(args.project).mkdir(parents=True, exist_ok=True)
    if args.no_project:  # accel launch --project_dir gives it one
        accelerator = Accelerator()
    else:
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
    skip = 0
    if not args.no_load and checkpoints.is_dir() and any(checkpoints.iterdir()):
        accelerator.load_state()  # the latest complete checkpoint
        resume = loader.progress.resume  # None when it was saved at an epoch boundary
        skip = resume.batches if resume is not None else 0
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    log = Path(args.project, f"steps_{accelerator.process_index}.log")
    once = Path(args.project, "signalled")
    self_pid = args.signal_pid_from == "self"
    target = os.getpid() if self_pid else int(os.environ.get(args.signal_pid_from, "0"))
    for _epoch in range(loader.iteration, args.epochs):
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for inputs, labels in batches:
            dying = attempt == "0" and accelerator.process_index == args.die_rank
            if counter.step == args.die_at and dying:
                os.kill(os.getpid(), signal.SIGKILL)
            mine = accelerator.process_index == args.signal_rank
            if args.signal_where:  # a machine, not a rank: c10d deals ranks in join order
                mine = (
                    os.environ.get(args.signal_where) == "1"
                    and accelerator.local_process_index == 0
                )
            signalling = mine and not once.exists()
            if counter.step == args.signal_at and signalling:
                once.touch()  # once per job: a replacement machine starts at attempt 0 again
                sent = signal.Signals[args.signal]
                arrived = _relay_arrival(sent)
                os.kill(target, sent)
                if arrived is not None and not arrived.wait(timeout=60):
                    raise RuntimeError(f"{sent.name} sent to {target} never came back here")
                if args.signal_again_during_save:
                    accelerator.register_save_state_pre_hook(
                        lambda *_: os.kill(target, signal.Signals[args.signal])
                    )
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
