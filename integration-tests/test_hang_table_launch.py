"""The hang report for real: 2 processes under ``accel launch`` whose workers record their
collectives with accel-ops: the automatic table, SIGUSR1, and the table in the failure summary
of a job that reached its timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_end_to_end import accel_command

HANG = Path(__file__).parent / "scripts" / "hang.py"


def line_of(comment: str) -> str:
    """``hang.py:<line>`` of the line of hang.py that carries ``comment``."""
    lines = HANG.read_text().splitlines()
    return f"hang.py:{next(i + 1 for i, line in enumerate(lines) if comment in line)}"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "RANK", "WORLD_"))}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def _launch(tmp_path: Path, mode: str, *flags: str, **env: str) -> subprocess.Popen:
    command = [*accel_command(), "launch", "--num_processes", "2", "--cpu", *flags, str(HANG)]
    return subprocess.Popen(
        command,
        env=clean_env(OUT=str(tmp_path), HANG_MODE=mode, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.multiprocess
def test_a_rank_sleeping_outside_any_collective_is_reported(tmp_path: Path):
    logs = tmp_path / "logs"
    proc = _launch(
        tmp_path, "sleep", "--hang-report-after", "2", "--log_dir", str(logs), HANG_SECONDS="7"
    )
    waiting = logs / "inflight" / "rank-0.json"
    deadline = time.monotonic() + 60
    while not (waiting.exists() and json.loads(waiting.read_text())["state"] == "waiting"):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    automatic = err.index("accel launch: a collective has waited")
    on_demand = err.index("accel launch: SIGUSR1 received")
    for start in (automatic, on_demand):
        table = err[start:].split("\n\n")[0]
        row0 = next(line for line in table.splitlines() if line.strip().startswith("0 "))
        assert "waiting in gather" in row0
        assert "shape (4, 5) float32" in row0
        assert f"{line_of('rank 0 waits here')} in <module>" in row0
        row1 = next(line for line in table.splitlines() if line.strip().startswith("1 "))
        assert "not in any collective" in row1
        assert "rank 1 in no collective while others wait" in table
    assert err.count("accel launch: a collective has waited") == 1  # once per hang


@pytest.mark.multiprocess
def test_a_deadlock_in_different_collectives_ends_with_the_table_in_the_summary(tmp_path: Path):
    logs = str(tmp_path / "logs")
    proc = _launch(
        tmp_path,
        "other",
        "--hang-report-after",
        "1",
        "--log_dir",
        logs,
        ACCEL_PROCESS_GROUP_TIMEOUT="6",
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    summary = err[err.index("accel launch: the job failed on machine 0") :]
    table = summary[summary.index("where each rank was in its collectives at the end:") :]
    rows = {}
    for line in table.splitlines()[2:]:
        if line.split()[:1] in (["0"], ["1"]):
            rows[line.split()[0]] = line
    assert "in gather" in rows["0"] and line_of("rank 0 waits here") in rows["0"]
    assert "in wait_for_everyone" in rows["1"] and line_of("rank 1 waits here") in rows["1"]
    assert "ranks wait in different collectives or call sites" in table
    # while it hung, the automatic report showed both ranks waiting
    live = err[err.index("accel launch: a collective has waited") :]
    assert "waiting in gather" in live and "waiting in wait_for_everyone" in live
