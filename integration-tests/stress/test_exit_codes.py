"""Stress: the exit code of ``accel launch`` is the job's, run after run (``nox -s stress``).

A finished job exits 0 every time, though it never tears its process group down itself (a
process group left alive at exit used to abort workers by SIGABRT in about 4 runs of 10); a job
whose rank 1 raises exits 1 every time, with that rank's traceback and never a SIGABRT. After
each run no process of the job is left.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

JOB = Path(__file__).with_name("short_job.py")
CLEAN_RUNS = 50
RAISING_RUNS = 10
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


def _run(job: Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = [*_accel(), "launch", "--quiet", "--cpu", "--num_processes", "2"]
    # a failed job keeps its logs: keep them in the test's folder, not in /tmp
    command += ["--log_dir", str(job.parent / "logs"), str(job)]
    return subprocess.run(
        command, env=_environment(**env), capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A copy of the job at a path of its own, so leftovers can be found by command line."""
    copy = tmp_path / "short_job.py"
    shutil.copy(JOB, copy)
    return copy


def test_a_finished_job_exits_zero_every_time(job: Path):
    failures = []
    for run in range(CLEAN_RUNS):
        done = _run(job)
        problems = []
        if done.returncode != 0:
            problems.append(f"exit code {done.returncode}")
        if "SIGABRT" in done.stderr or "terminate called" in done.stderr:
            problems.append("SIGABRT")
        # the ranks share one stdout, so their lines can interleave: match, don't split
        if sorted(re.findall(r"rank \d finished", done.stdout)) != FINISHED:
            problems.append(f"stdout {done.stdout!r}")
        if _leftovers(job):
            problems.append(f"processes left: {_leftovers(job)}")
        if problems:
            failures.append(f"run {run}: {', '.join(problems)}\n{done.stderr[-2000:]}")
    assert not failures, f"{len(failures)} of {CLEAN_RUNS} runs failed:\n" + "\n".join(failures)


def test_a_job_whose_rank_raises_exits_one_every_time(job: Path):
    failures = []
    for run in range(RAISING_RUNS):
        done = _run(job, RAISE_ON_RANK="1")
        problems = []
        if done.returncode != 1:
            problems.append(f"exit code {done.returncode}")
        if "SIGABRT" in done.stderr or "terminate called" in done.stderr:
            problems.append("SIGABRT")
        if "RuntimeError: rank 1 raises on purpose" not in done.stderr:
            problems.append("no traceback of rank 1")
        if "rank 1 (local rank 1" not in done.stderr or "exited with code 1" not in done.stderr:
            problems.append("the summary does not name rank 1's exit")
        if _leftovers(job):
            problems.append(f"processes left: {_leftovers(job)}")
        if problems:
            failures.append(f"run {run}: {', '.join(problems)}\n{done.stderr[-2000:]}")
    assert not failures, f"{len(failures)} of {RAISING_RUNS} runs failed:\n" + "\n".join(failures)
