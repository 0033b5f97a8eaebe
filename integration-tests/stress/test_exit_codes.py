"""Stress: the exit code of ``accel launch`` is the job's, run after run (``nox -s stress``).

A finished job exits 0 every time, though it never tears its process group down itself (a
process group left alive at exit used to abort workers by SIGABRT in about 4 runs of 10); a job
whose rank 1 raises exits 1 every time, with that rank's traceback and never a SIGABRT. After
each run no process of the job is left.

The runs go two at a time (two streams, each with its own copy of the job): a loaded machine, as
CI's are, and the whole session's time about a quarter shorter than one launch after another on
2 cores. Each run's rendezvous port is chosen by the test, never one a run in flight holds, so that
two launches never pick the same free port at the same moment (a test of ``accel launch``'s
exit codes, not of two jobs racing for one port).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from accel_base.ports import get_free_rendezvous_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

JOB = Path(__file__).with_name("short_job.py")
CLEAN_RUNS = 50
RAISING_RUNS = 10
#: Launches running at once.
STREAMS = 2
FINISHED = ["rank 0 finished", "rank 1 finished"]


def _accel() -> list[str]:
    script = Path(sys.executable).parent / "accel"
    return [str(script)] if script.exists() else [shutil.which("accel") or "accel"]


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "RANK", "WORLD_"))}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def _leftovers(job: Path) -> list[int]:
    left = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if str(job) in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            left.append(process.pid)
    return left


def _run(job: Path, port: int, **env: str) -> subprocess.CompletedProcess[str]:
    command = [*_accel(), "launch", "--quiet", "--cpu", "--num_processes", "2"]
    command += ["--main_process_port", str(port)]
    # a failed job keeps its logs: keep them in the test's folder, not in /tmp
    command += ["--log_dir", str(job.parent / "logs"), str(job)]
    return subprocess.run(
        command, env=_environment(**env), capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def jobs(tmp_path: Path) -> list[Path]:
    """One copy of the job per stream, each at a path of its own, so that a stream's leftovers
    are found by command line while the other stream runs."""
    copies = []
    for stream in range(STREAMS):
        folder = tmp_path / f"stream{stream}"
        folder.mkdir()
        copies.append(folder / "short_job.py")
        shutil.copy(JOB, copies[-1])
    return copies


def _in_streams(jobs: list[Path], runs: int, check: Callable[[Path, int], list[str]]) -> list[str]:
    """``check(job, port)`` ``runs`` times, :data:`STREAMS` at a time (run ``i`` on stream
    ``i % STREAMS``, one after another within a stream), each run with a free port that no run
    in flight holds; the failures, each named by its run."""
    in_flight: set[int] = set()
    lock = threading.Lock()

    def port_for_a_run() -> int:
        with lock:
            port = get_free_rendezvous_port()
            while port in in_flight:
                port = get_free_rendezvous_port()
            in_flight.add(port)
            return port

    def stream(index: int) -> list[str]:
        failures = []
        for run in range(index, runs, STREAMS):
            port = port_for_a_run()
            try:
                problems = check(jobs[index], port)
            finally:
                with lock:
                    in_flight.discard(port)
            if problems:
                failures.append(f"run {run}: " + "\n".join(problems))
        return failures

    with ThreadPoolExecutor(STREAMS) as pool:
        return [failure for found in pool.map(stream, range(STREAMS)) for failure in found]


def _exit_problems(done: subprocess.CompletedProcess[str], job: Path, code: int) -> list[str]:
    """What every run checks: the exit code, no SIGABRT, no process of the job left."""
    problems = []
    if done.returncode != code:
        problems.append(f"exit code {done.returncode}")
    if "SIGABRT" in done.stderr or "terminate called" in done.stderr:
        problems.append("SIGABRT")
    if _leftovers(job):
        problems.append(f"processes left: {_leftovers(job)}")
    return problems


def _report(done: subprocess.CompletedProcess[str], problems: list[str]) -> list[str]:
    return [", ".join(problems), done.stderr[-2000:]] if problems else []


def _finished_job_problems(job: Path, port: int) -> list[str]:
    done = _run(job, port)
    problems = _exit_problems(done, job, 0)
    # the ranks share one stdout, so their lines can interleave: match, don't split
    if sorted(re.findall(r"rank \d finished", done.stdout)) != FINISHED:
        problems.append(f"stdout {done.stdout!r}")
    return _report(done, problems)


def _raising_job_problems(job: Path, port: int) -> list[str]:
    done = _run(job, port, RAISE_ON_RANK="1")
    problems = _exit_problems(done, job, 1)
    if "RuntimeError: rank 1 raises on purpose" not in done.stderr:
        problems.append("no traceback of rank 1")
    if "rank 1 (local rank 1" not in done.stderr or "exited with code 1" not in done.stderr:
        problems.append("the summary does not name rank 1's exit")
    return _report(done, problems)


def test_a_finished_job_exits_zero_every_time(jobs: list[Path]):
    failures = _in_streams(jobs, CLEAN_RUNS, _finished_job_problems)
    assert not failures, f"{len(failures)} of {CLEAN_RUNS} runs failed:\n" + "\n".join(failures)


def test_a_job_whose_rank_raises_exits_one_every_time(jobs: list[Path]):
    failures = _in_streams(jobs, RAISING_RUNS, _raising_job_problems)
    assert not failures, f"{len(failures)} of {RAISING_RUNS} runs failed:\n" + "\n".join(failures)
