"""Preemption without loss: on the scheduler's signal, finish the step, agree, save, exit.

When a process receives the preemption signal (``SIGTERM`` unless ``ACCEL_PREEMPTION_SIGNAL``
names another, e.g. ``SIGUSR1`` for SLURM's ``--signal=USR1@90``), the handler only records it.
The script goes on with its step, its own bookkeeping included, until it asks a prepared data
loader for the next batch: that request is the step boundary. Once the ranks agreed (below), every
rank calls ``save_state()`` into the project's automatic checkpoint
folder, the main process prints one line saying where the checkpoint is and how to resume, and
every process exits with :data:`PREEMPTED_EXIT_CODE` (75, ``EX_TEMPFAIL``: try again).

The ranks agree without waiting: every few ``accelerator.backward`` calls (which every rank
makes in step, or the job would hang anyway) they vote with an asynchronous all-reduce on a gloo
group of their own, and read the vote at the next one (about every :data:`VOTE_SECONDS`). Every
rank reads the same result after the same backward pass, so all of them stop at the batch request
after that step: a fraction of a second after the signal. Loops without ``backward`` (evaluation)
take no part, so a loop that only some ranks run can't make the others wait.

On by default where a checkpoint has a place to go: ``ProjectConfiguration(project_dir=...,
automatic_checkpoint_naming=True)``, or ``ACCEL_PROJECT_DIR`` (``accel launch --project_dir``)
for a script without a project folder. ``ACCEL_PREEMPTION_SIGNAL=none`` turns it off (the
signal then does what it did before). Under SLURM the main process also asks for the job to be
requeued (``scontrol requeue``) unless ``ACCEL_SLURM_REQUEUE=0``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
#: About how many seconds of training lie between two votes of the ranks (see _Agreement);
#: ``ACCEL_PREEMPTION_VOTE_SECONDS`` sets it (0: a vote at every backward pass).
VOTE_SECONDS = 0.2
VOTE_VARIABLE = "ACCEL_PREEMPTION_VOTE_SECONDS"
MAX_VOTE_INTERVAL = 10_000
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


def vote_seconds(environ: dict[str, str] | None = None) -> float:
    """``ACCEL_PREEMPTION_VOTE_SECONDS`` (seconds >= 0), else :data:`VOTE_SECONDS`."""
    from accel_base.env_values import seconds

    environ = os.environ if environ is None else environ
    return seconds(environ, VOTE_VARIABLE, VOTE_SECONDS, zero_ok=True)


class _Agreement:
    """Votes on a gloo group of its own, every few backward passes, read one vote later.

    A vote is an asynchronous MAX all-reduce of ``[signalled, interval]``: whether any rank was
    signalled, and how many backward passes to the next vote (each rank proposes enough for about
    :data:`VOTE_SECONDS` of training, the largest proposal wins). A rank starts vote ``v`` and
    reads vote ``v - 1`` at the same backward pass as every other rank, so they all decide
    together; the vote costs one small all-reduce every :data:`VOTE_SECONDS`, never a wait.
    """

    def __init__(self, seconds: float = VOTE_SECONDS) -> None:
        self._seconds = seconds
        self._group: Any = None
        self._buffer: torch.Tensor | None = None
        self._work: Any = None
        self._countdown = 1
        self._interval = 1  # the backward passes between the last vote and this one
        self._since = time.perf_counter()

    def after_backward(self, signalled: bool) -> bool:
        """Count a backward pass (every rank makes the same ones); at a vote, start this vote and
        return the previous one's decision."""
        self._countdown -= 1
        if self._countdown > 0:
            return False
        import torch.distributed as dist

        if self._group is None:
            # every rank reaches its first backward pass; gloo takes CPU tensors under NCCL too
            self._group = dist.new_group(backend="gloo")
        decided, interval = False, 1
        if self._work is not None:
            self._work.wait()
            assert self._buffer is not None
            decided, interval = bool(self._buffer[0].item()), int(self._buffer[1].item())
        now = time.perf_counter()
        per_pass = (now - self._since) / self._interval
        self._since = now
        proposal = min(max(int(self._seconds / max(per_pass, 1e-6)), 1), MAX_VOTE_INTERVAL)
        self._buffer = torch.tensor([int(signalled), proposal], dtype=torch.int64)
        self._work = dist.all_reduce(
            self._buffer, op=dist.ReduceOp.MAX, group=self._group, async_op=True
        )
        self._countdown = self._interval = interval
        return decided

    def settle(self) -> bool:
        """Wait for the vote in flight (every rank started it); returns its decision. The next
        backward pass votes again."""
        decided = False
        if self._work is not None:
            self._work.wait()
            assert self._buffer is not None
            decided = bool(self._buffer[0].item())
            self._work = None
        self._countdown = self._interval = 1
        self._since = time.perf_counter()
        return decided


class PreemptionWatch:
    """Listens for the preemption signal for one ``Accelerator`` and acts at step boundaries."""

    def __init__(self, accelerator: Accelerator, signum: signal.Signals) -> None:
        self.accelerator = accelerator
        self.signum = signum
        self.received: signal.Signals | None = None
        self._decided = False
        self._stopping = False
        self._paused = False
        many = accelerator.num_processes > 1
        self._agreement = _Agreement(vote_seconds()) if many else None
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
        # the handler set before is not called: it would end the process (torch's agent's
        # raises, the default terminates); ACCEL_PREEMPTION_SIGNAL=none keeps it instead
        if self.received is None:
            self.received = signal.Signals(signum)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No votes inside (``join_uneven_inputs``: ranks make different numbers of backward
        passes there); the vote in flight is settled first, so every rank starts even."""
        if self._agreement is not None and self._agreement.settle():
            self._decided = True  # acted on at the first batch request in the block
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def after_backward(self) -> None:
        """``accelerator.backward`` ran: the ranks vote (every few passes) on stopping."""
        if self._decided or self._paused:
            return
        signalled = self.received is not None
        agreement = self._agreement
        self._decided = signalled if agreement is None else agreement.after_backward(signalled)

    def at_boundary(self) -> None:
        """A prepared loader was asked for its next batch: stop here once the ranks agreed."""
        if self._decided and not self._stopping:
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
