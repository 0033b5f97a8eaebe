"""Preemption without loss: on the scheduler's signal, finish the step, agree, save, exit.

When a process receives the preemption signal (``SIGTERM`` unless ``ACCEL_PREEMPTION_SIGNAL``
names another, e.g. ``SIGUSR1`` for SLURM's ``--signal=USR1@90``), the handler only records it.
The script goes on with its step, its own bookkeeping included, until it asks a prepared data
loader for the next batch: that request is the step boundary. There the ranks agree on one
boundary (below), every rank calls ``save_state()`` into the project's automatic checkpoint
folder, the main process prints one line saying where the checkpoint is and how to resume, and
every process exits with :data:`PREEMPTED_EXIT_CODE` (75, ``EX_TEMPFAIL``: try again).

Agreement costs no waiting: at each boundary a rank starts an asynchronous all-reduce (MAX) of
"I was signalled" on a gloo group of its own and reads the result of the previous boundary's.
Every rank reads the same result at the same boundary, so all of them stop after the same step,
one step after the first rank saw the signal. That needs every rank to ask its prepared loaders
for the same number of batches, which they do unless a loader was prepared with
``even_batches=False`` (such loaders take no part).

On by default where a checkpoint has a place to go: ``ProjectConfiguration(project_dir=...,
automatic_checkpoint_naming=True)``, or ``ACCEL_PROJECT_DIR`` (``accel launch --project_dir``)
for a script without a project folder. ``ACCEL_PREEMPTION_SIGNAL=none`` turns it off (the
signal then does what it did before). Under SLURM the main process also asks for the job to be
requeued (``scontrol requeue``) unless ``ACCEL_SLURM_REQUEUE=0``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accel_core.accelerator import Accelerator
    from accel_core.configuration import ProjectConfiguration

#: The exit code of every process of a job stopped by the preemption signal once its checkpoint
#: is complete (``EX_TEMPFAIL``); accel-launch exits with it too.
PREEMPTED_EXIT_CODE = 75
SIGNAL_VARIABLE = "ACCEL_PREEMPTION_SIGNAL"
PROJECT_DIR_VARIABLE = "ACCEL_PROJECT_DIR"
REQUEUE_VARIABLE = "ACCEL_SLURM_REQUEUE"
#: The file in the launcher's report folder (``ACCEL_HANG_REPORT_DIR``) that tells it the job
#: stopped for preemption with a complete checkpoint (JSON: ``checkpoint``, ``signal``, ``line``).
MARKER_FILE = "preempted.json"
_OFF = frozenset({"", "none", "off", "no", "0", "false"})


def preemption_signal(environ: dict[str, str] | None = None) -> signal.Signals | None:
    """The signal named by ``ACCEL_PREEMPTION_SIGNAL`` (``SIGTERM`` when unset; ``None`` for
    ``none``). Names with or without ``SIG`` and numbers are accepted."""
    text = (os.environ if environ is None else environ).get(SIGNAL_VARIABLE, "SIGTERM").strip()
    if text.lower() in _OFF:
        return None
    if text.isdigit():
        try:
            return signal.Signals(int(text))
        except ValueError:
            pass
    name = text.upper() if text.upper().startswith("SIG") else f"SIG{text.upper()}"
    try:
        return signal.Signals[name]
    except KeyError:
        raise ValueError(
            f"{SIGNAL_VARIABLE}={text!r} is not a signal; expected a name such as SIGTERM or "
            "SIGUSR1, a number, or none"
        ) from None


class _Agreement:
    """One boundary's vote read at the next: an asynchronous MAX all-reduce on a gloo group."""

    def __init__(self) -> None:
        self._group: Any = None
        self._buffer: torch.Tensor | None = None
        self._work: Any = None

    def vote(self, stop: bool) -> bool:
        """Vote ``stop`` for this boundary; returns whether any rank voted so at the previous."""
        import torch.distributed as dist

        if self._group is None:
            # all ranks reach their first boundary together; gloo takes CPU tensors under NCCL too
            self._group = dist.new_group(backend="gloo")
        decided = False
        if self._work is not None:
            self._work.wait()
            assert self._buffer is not None
            decided = bool(self._buffer.item())
        self._buffer = torch.tensor([int(stop)], dtype=torch.int32)
        self._work = dist.all_reduce(
            self._buffer, op=dist.ReduceOp.MAX, group=self._group, async_op=True
        )
        return decided

    def settle(self) -> None:
        """Wait for the vote in flight (every rank started it), before anything else is sent."""
        if self._work is not None:
            self._work.wait()
            self._work = None


class PreemptionWatch:
    """Listens for the preemption signal for one ``Accelerator`` and acts at step boundaries."""

    def __init__(self, accelerator: Accelerator, signum: signal.Signals) -> None:
        self.accelerator = accelerator
        self.signum = signum
        self.received: signal.Signals | None = None
        self._stopping = False
        self._agreement = _Agreement() if accelerator.num_processes > 1 else None
        self._previous: Any = None

    def install(self) -> bool:
        """Set the signal handler (main thread only); returns whether it was set."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._previous = signal.signal(self.signum, self._on_signal)
        return True

    def uninstall(self) -> None:
        """Give the signal back its previous handler."""
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(self.signum, self._previous)
            self._previous = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
        previous = self._previous
        if callable(previous):
            previous(signum, frame)

    def at_boundary(self) -> None:
        """A prepared loader was asked for its next batch: stop here when the ranks agree."""
        if self._stopping:
            return
        signalled = self.received is not None
        agreement = self._agreement
        decided = signalled if agreement is None else agreement.vote(signalled)
        if decided:
            self._stopping = True
            if self._agreement is not None:
                self._agreement.settle()
            self._checkpoint_and_exit()

    def _checkpoint_and_exit(self) -> None:
        accelerator = self.accelerator
        folder = accelerator.save_state()
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            line = (
                f"accel: stopped by {self.signum.name} (preemption) {_position(accelerator)}; "
                f"checkpoint saved to {folder} (to resume, run the same command again: "
                "load_state() or --auto_resume continues from it)"
            )
            if not _write_marker(folder, self.signum, line):
                print(line, file=sys.stderr, flush=True)  # no accel launch to print it
            _requeue_under_slurm()
        raise SystemExit(PREEMPTED_EXIT_CODE)


def _position(accelerator: Accelerator) -> str:
    loader = accelerator.gradient_state.active_dataloader
    progress = getattr(loader, "progress", None)
    if progress is None:
        return "at a step boundary"
    return f"after batch {progress.batches} of epoch {progress.epoch}"


def _write_marker(folder: str, signum: signal.Signals, line: str) -> bool:
    """Tell ``accel launch`` (through its report folder) where the checkpoint is; returns
    whether there was a launcher to tell."""
    report = os.environ.get("ACCEL_HANG_REPORT_DIR")
    if not report:
        return False
    path = os.path.join(report, MARKER_FILE)
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as file:
            json.dump({"checkpoint": folder, "signal": signum.name, "line": line}, file)
        os.replace(partial, path)
    except OSError:
        return False
    return True


def _requeue_under_slurm(run: Callable[..., Any] = subprocess.run) -> None:
    """``scontrol requeue`` this SLURM job (array task included), as Lightning's auto-requeue."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job or os.environ.get(REQUEUE_VARIABLE, "1").strip().lower() in _OFF:
        return
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    target = f"{array_job}_{task}" if array_job and task else job
    try:
        result = run(["scontrol", "requeue", target], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        print(f"accel: could not requeue SLURM job {target}: {error}", file=sys.stderr)
        return
    if result.returncode == 0:
        print(f"accel: SLURM job {target} requeued", file=sys.stderr, flush=True)
    else:
        print(
            f"accel: scontrol requeue {target} failed ({result.returncode}): "
            f"{result.stderr.strip()}",
            file=sys.stderr,
        )


def checkpoint_folder_configured(accelerator: Accelerator) -> bool:
    """Whether ``save_state()`` without a folder has somewhere to write."""
    configuration = accelerator.project_configuration
    return bool(configuration.project_dir) and bool(configuration.automatic_checkpoint_naming)


def adopt_project_dir(configuration: ProjectConfiguration) -> None:
    """``ACCEL_PROJECT_DIR`` (``accel launch --project_dir``) becomes the project folder, with
    automatic checkpoint naming, of a script that sets no project folder itself."""
    opted_in = os.environ.get(PROJECT_DIR_VARIABLE, "").strip()
    if not configuration.project_dir and opted_in:
        configuration.set_directories(opted_in)
        configuration.automatic_checkpoint_naming = True


def watch(accelerator: Accelerator) -> PreemptionWatch | None:
    """Start listening for the preemption signal when it is on and a checkpoint has a place
    (a project folder with automatic checkpoint naming)."""
    signum = preemption_signal()
    if signum is None:
        return None
    if not checkpoint_folder_configured(accelerator):
        return None
    watcher = PreemptionWatch(accelerator, signum)
    if not watcher.install():
        return None
    accelerator.gradient_state._set_step_boundary_hook(watcher.at_boundary)
    return watcher
