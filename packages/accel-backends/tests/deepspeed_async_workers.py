"""Worker functions of test_deepspeed_async_save.py: ``save_state(async_save=True)`` under the
deepspeed strategy on 2 real processes (gloo on CPU), run by ``accel_testing.run_workers``.

The background write is held at a gate (a ``threading.Event``) in front of the strategy's
``save_checkpoint``, which the training thread opens after its next step. Nothing of
torch.distributed or DeepSpeed is replaced: the gate wraps accel's own ``save_checkpoint`` and
timestamps accel's own ``write_and_commit``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from deepspeed_workers import loader, new_model, register, reset, train_steps

#: How long a held write waits for the gate before going on anyway: a broken test fails on its
#: timestamps instead of hanging (it never elapses in a passing run).
GATE_TIMEOUT = 120.0
#: (name, ZeRO stage, bf16) of the runs compared with synchronous saves.
RUNS = (("zero2", 2, False), ("zero3", 3, False), ("zero2_bf16", 2, True))


class HeldWrite:
    """Holds ``accelerator``'s background writes at a gate; records when they finished.

    Attributes:
        gate: set it to let the held write go on (``hold()`` clears it).
        threads: the thread each ``save_checkpoint`` ran on.
        finished: ``time.monotonic()`` when each background ``write_and_commit`` returned.
    """

    def __init__(self, accelerator: Any) -> None:
        from accel_core.checkpointing import background

        self.gate = threading.Event()
        self.gate.set()
        self.threads: list[str] = []
        self.finished: list[float] = []
        strategy = accelerator.strategy.checkpoint_io
        save_checkpoint = strategy.save_checkpoint
        write_and_commit = background.write_and_commit

        def held_save(writer: Any, *args: Any, **kwargs: Any) -> None:
            self.gate.wait(GATE_TIMEOUT)
            self.threads.append(threading.current_thread().name)
            save_checkpoint(writer, *args, **kwargs)

        def timed_write(*args: Any) -> None:
            try:
                write_and_commit(*args)
            finally:
                self.finished.append(time.monotonic())

        strategy.save_checkpoint = held_save
        background.write_and_commit = timed_write
        self._restore = lambda: setattr(background, "write_and_commit", write_and_commit)

    def hold(self) -> None:
        """Make the next write wait at the gate."""
        self.gate.clear()

    def release(self) -> None:
        """Stop timing the writes."""
        self._restore()


def _prepared(stage: int, bf16: bool, seed: int, project: Path | None = None) -> tuple:
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator, ProjectConfiguration

    register()
    plugin = DeepSpeedPlugin(zero_stage=stage)
    config = None
    if project is not None:
        config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = Accelerator(
        deepspeed_plugin=plugin,
        mixed_precision="bf16" if bf16 else "no",
        project_config=config,
    )
    model = new_model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler, _ = accelerator.prepare(model, optimizer, scheduler, loader())
    return accelerator, model, optimizer, scheduler


def _storage_pointers(accelerator: Any) -> list[int]:
    """Where the kept CPU copies of the DeepSpeed states are (the next save copies into them)."""
    staging = accelerator._background_saver.staging or {}
    return [view.data_ptr() for entry in staging["optimizer_states"] for view in entry["storages"]]


def overlap_and_equality() -> None:
    """For each of :data:`RUNS`: 3 steps, then DeepSpeed's own ``save_checkpoint`` into
    ``direct``, ``save_state(sync)`` and ``save_state(async, async_save=True)`` of the same
    state, the async write held until 2 more steps ran; a second asynchronous save after one
    more step (into the first one's copies). Then a fresh run (other weights) loads ``async``
    and trains the same 2 steps. Writes ``results.json`` (rank 0)."""
    out = Path(sys.argv[1])
    results: dict[str, Any] = {}
    for name, stage, bf16 in RUNS:
        dtype = torch.bfloat16 if bf16 else torch.float32
        folder = out / name
        accelerator, model, optimizer, scheduler = _prepared(stage, bf16, seed=0)
        held = HeldWrite(accelerator)
        train_steps(accelerator, model, optimizer, scheduler, range(3), dtype)
        model.save_checkpoint(str(folder / "direct"), "pytorch_model")  # DeepSpeed's own
        accelerator.save_state(folder / "sync")
        held.hold()
        called = time.monotonic()
        accelerator.save_state(folder / "async", async_save=True)
        returned = time.monotonic()
        # Training goes on while the write is held: these steps change every original tensor.
        first = train_steps(accelerator, model, optimizer, scheduler, range(3, 5), dtype)
        step_end = time.monotonic()
        folder_at_step_end = (folder / "async").exists()
        held.gate.set()
        accelerator.wait_for_checkpoint()
        first_copies = _storage_pointers(accelerator)
        train_steps(accelerator, model, optimizer, scheduler, range(5, 6), dtype)
        accelerator.save_state(folder / "async_2", async_save=True)
        accelerator.wait_for_checkpoint()
        second_copies = _storage_pointers(accelerator)
        main = accelerator.is_main_process
        held.release()
        accelerator.end_training()
        reset()

        accelerator, model, optimizer, scheduler = _prepared(stage, bf16, seed=1)
        accelerator.load_state(folder / "async")
        second = train_steps(accelerator, model, optimizer, scheduler, range(3, 5), dtype)
        accelerator.end_training()
        reset()
        results[name] = {
            "save_seconds": returned - called,
            "step_end_before_write_end": step_end < held.finished[0],
            "folder_at_step_end": folder_at_step_end,
            "threads": held.threads,
            "copies": len(first_copies),
            "copies_reused": first_copies == second_copies,
            "losses": [first, second],
        }
    if main:
        (out / "results.json").write_text(json.dumps(results))


def killed_during_write() -> None:
    """Automatic naming under ZeRO ``argv[2]``: ``checkpoint_0`` saved synchronously after 3
    steps, the losses of 2 more steps written for the resumed run to compare, then an
    asynchronous ``checkpoint_1``: once its capture is taken and the training thread ran one
    more step, every process writes its files and kills itself with SIGKILL before the
    manifest and the rename."""
    project, stage = Path(sys.argv[1]), int(sys.argv[2])
    accelerator, model, optimizer, scheduler = _prepared(stage, False, seed=0, project=project)
    train_steps(accelerator, model, optimizer, scheduler, range(3), torch.float32)
    accelerator.save_state()
    after = train_steps(accelerator, model, optimizer, scheduler, range(3, 5), torch.float32)
    if accelerator.is_main_process:
        (project / "losses.json").write_text(json.dumps(after))
    accelerator.wait_for_everyone()
    gate = threading.Event()
    strategy = accelerator.strategy.checkpoint_io
    strategy.save_checkpoint = _then_die(strategy.save_checkpoint, gate)
    accelerator.save_state(async_save=True)
    try:
        train_steps(accelerator, model, optimizer, scheduler, range(5, 6), torch.float32)
    finally:
        gate.set()
    threading.Event().wait(GATE_TIMEOUT)  # the background thread kills the process first
    raise SystemExit("the background write did not kill the process")


def _then_die(save_checkpoint: Any, gate: threading.Event) -> Any:
    """At ``gate``, ``save_checkpoint``, then SIGKILL: the files are written, the manifest and
    rename not."""

    def save_then_die(writer: Any, *args: Any, **kwargs: Any) -> None:
        gate.wait(GATE_TIMEOUT)
        save_checkpoint(writer, *args, **kwargs)
        writer.finish()  # every file written and checksummed: only the commit is left
        (writer.root / f"killed_{writer.rank}").write_text("")
        os.kill(os.getpid(), signal.SIGKILL)

    return save_then_die


def resume_after_kill() -> None:
    """A fresh run (other initial weights) in the killed run's project: ``load_state()`` picks
    the latest complete checkpoint, the same 2 steps give the killed run's losses, and the next
    asynchronous save completes. Writes ``resumed.json`` (rank 0)."""
    project, stage = Path(sys.argv[1]), int(sys.argv[2])
    accelerator, model, optimizer, scheduler = _prepared(stage, False, seed=1, project=project)
    accelerator.load_state()
    losses = train_steps(accelerator, model, optimizer, scheduler, range(3, 5), torch.float32)
    folder = accelerator.save_state(async_save=True)
    accelerator.wait_for_checkpoint()
    if accelerator.is_main_process:
        expected = json.loads((project / "losses.json").read_text())
        results = {"continued": losses == expected, "next_folder": Path(folder).name}
        (project / "resumed.json").write_text(json.dumps(results))
    accelerator.wait_for_everyone()
    accelerator.end_training()
