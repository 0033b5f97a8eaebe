"""The hang report: the table from records, and for real on 2 processes (automatic, SIGUSR1, and
in the failure summary of a job that reached its timeout)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SCRIPTS, accel_command, clean_env

from accel_launch.launch.hang_report import format_hang_table, longest_wait

HANG = SCRIPTS / "hang.py"


def line_of(comment: str) -> str:
    """``hang.py:<line>`` of the line of hang.py that carries ``comment``."""
    lines = HANG.read_text().splitlines()
    return f"hang.py:{next(i + 1 for i, line in enumerate(lines) if comment in line)}"


def record(rank: int, state: str, **fields: object) -> dict:
    return {"rank": rank, "pid": 100 + rank, "state": state, "since": 1000.0, **fields}


def test_the_table_names_what_each_rank_waits_in_and_the_idle_culprit():
    records = {
        0: record(0, "waiting", operation="gather", inputs="shape (4) float32", call_site="t.py:9"),
        2: record(2, "running"),
    }
    text = format_hang_table(records, range(4), now=1312.0)
    lines = text.splitlines()
    assert lines[0].split() == ["rank", "where", "for", "inputs", "call", "site"]
    assert lines[1].split() == [
        "0",
        "waiting",
        "in",
        "gather",
        "312",
        "s",
        "shape",
        "(4)",
        "float32",
        "t.py:9",
    ]
    assert lines[2].split()[:2] == ["1", "not"] and "no record" in lines[2]
    assert lines[3].split() == ["2", "not", "in", "any", "collective"]
    assert "ranks 1, 2, 3 in no collective while others wait: usually the culprit" in text
    assert longest_wait(records, now=1312.0) == 312.0


def test_ranks_in_different_collectives_are_pointed_out():
    records = {
        0: record(0, "waiting", operation="gather", call_site="t.py:9"),
        1: record(
            1,
            "failed",
            operation="wait_for_everyone",
            call_site="t.py:7",
            error="wait_for_everyone failed on rank 1 of 2: the collective did not "
            "complete in 5 s. Usually another rank ...",
        ),
    }
    text = format_hang_table(records, range(2), now=1010.0)
    assert "failed in wait_for_everyone: the collective did not complete in 5 s" in text
    assert "in no collective" not in text
    assert "ranks wait in different collectives or call sites" in text


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
    proc = _launch(tmp_path, "other", "--hang-report-after", "1", ACCEL_PROCESS_GROUP_TIMEOUT="6")
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
