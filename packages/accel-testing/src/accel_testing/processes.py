"""Start N real Python processes wired together the way torchrun wires its workers.

Each worker gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` and forms its process group itself (gloo over loopback on CPU). Nothing is mocked:
the workers are separate interpreters.

A worker is either a script (``script=path``, run as ``__main__``) or a top-level function of a
Python file (``function="path/to/file.py::name"``), so a test module can keep its worker code next
to its assertions. Either runs under accel-launch's worker bootstrap, which ends the process with
the exit code Python would give but without interpreter finalization (see
``accel_launch.launch.finish``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# accel-launch's probe (127.0.0.1 by default), re-exported as accel_testing.free_port
from accel_launch.launch.ports import free_port

# Workers end through accel-launch's bootstrap (accel_launch.launch.finish), as under `accel
# launch`: the exit code Python would give, without the interpreter finalization that can abort a
# process that used torch.distributed.
_SCRIPT_RUNNER = ["-m", "accel_launch.launch.worker"]
_FUNCTION_RUNNER = (
    "import runpy, sys; from accel_launch.launch.finish import run_and_finish; "
    "path, name = sys.argv[1].rsplit('::', 1); sys.argv = [path, *sys.argv[2:]]; "
    "run_and_finish(lambda: runpy.run_path(path, run_name='accel_testing_worker')[name]())"
)
_PLAIN_FUNCTION_RUNNER = (
    "import runpy, sys; path, name = sys.argv[1].rsplit('::', 1); sys.argv = [path, *sys.argv[2:]];"
    " runpy.run_path(path, run_name='accel_testing_worker')[name]()"
)


@dataclass(frozen=True)
class WorkerResult:
    """What one worker process left behind."""

    rank: int
    returncode: int
    stdout: str
    stderr: str


class WorkersFailed(AssertionError):
    """One or more workers exited non-zero or did not finish in time."""

    def __init__(self, message: str, results: list[WorkerResult]) -> None:
        super().__init__(message)
        self.results = results


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_workers(
    nprocs: int,
    *,
    script: str | Path | None = None,
    function: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    check: bool = True,
    bootstrap: bool = True,
) -> list[WorkerResult]:
    """Run ``nprocs`` workers to completion and return their results, ordered by rank.

    ``env`` is added to each worker's environment (after the torchrun variables, so a test can
    override them, for example ``WORLD_SIZE='abc'``). With ``check`` (the default) a worker that
    exits non-zero raises :class:`WorkersFailed` carrying every rank's output; a run that exceeds
    ``timeout`` seconds kills all workers and raises too. ``bootstrap=False`` runs the worker in
    a plain interpreter (``python script.py``), with its ordinary exit and finalization.
    """
    if (script is None) == (function is None):
        raise ValueError("run_workers needs exactly one of script= or function=")
    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    runner = _SCRIPT_RUNNER if bootstrap else []
    function_runner = _FUNCTION_RUNNER if bootstrap else _PLAIN_FUNCTION_RUNNER
    command = (
        [sys.executable, *runner, str(script), *args]
        if script is not None
        else [sys.executable, "-c", function_runner, str(function), *args]
    )
    port = str(free_port())
    procs = []
    for rank in range(nprocs):
        worker_env = dict(os.environ)
        worker_env.update(
            RANK=str(rank),
            WORLD_SIZE=str(nprocs),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(nprocs),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        worker_env.update(env or {})
        procs.append(
            subprocess.Popen(
                command, env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    deadline = time.monotonic() + timeout
    outputs: list[tuple[str, str]] = []
    timed_out = False
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            timed_out = True
            for other in procs:
                other.kill()
            outputs.append(proc.communicate())
    for proc in procs[len(outputs) :]:
        outputs.append(proc.communicate())
    results = [
        WorkerResult(rank, proc.returncode, out, err)
        for rank, (proc, (out, err)) in enumerate(zip(procs, outputs, strict=True))
    ]
    if check and (timed_out or any(r.returncode != 0 for r in results)):
        reason = f"timed out after {timeout:.0f}s" if timed_out else "failed"
        report = "\n".join(
            f"--- rank {r.rank} exit {r.returncode}\nstdout:\n{_tail(r.stdout)}\nstderr:\n"
            f"{_tail(r.stderr)}"
            for r in results
        )
        raise WorkersFailed(f"{nprocs} workers {reason}:\n{report}", results)
    return results
