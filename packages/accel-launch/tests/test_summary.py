"""The failure summary, from failure records and files laid out as torch's agent lays them out."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace

from accel_launch.launch.summary import format_failure_summary, root_cause


def failure(
    tmp_path: Path, rank: int, exitcode: int, timestamp: int, message: str = "", output: str = ""
) -> SimpleNamespace:
    folder = tmp_path / "attempt_0" / str(rank)
    folder.mkdir(parents=True)
    error_file = folder / "error.json"
    if message:
        error_file.write_text(json.dumps({"message": {"message": message, "extraInfo": {}}}))
    if output:
        (folder / "output.log").write_text(output)
    return SimpleNamespace(
        local_rank=rank,
        pid=1000 + rank,
        exitcode=exitcode,
        error_file=str(error_file),
        timestamp=timestamp,
    )


def test_the_root_cause_comes_first_with_exception_and_output_tail(tmp_path: Path):
    failures = {
        0: failure(tmp_path, 0, -signal.SIGTERM, timestamp=100),
        1: failure(
            tmp_path,
            1,
            3,
            timestamp=100,
            message="RuntimeError: boom",
            output="".join(f"line {i}\n" for i in range(15)),
        ),
        2: failure(tmp_path, 2, -signal.SIGKILL, timestamp=101),
    }
    assert root_cause(failures) == 1
    text = format_failure_summary(failures, machine_rank=3)
    lines = text.splitlines()
    assert lines[0].startswith("accel launch: the job failed on machine 3 (")
    assert lines[1] == "  rank 1 (local rank 1, pid 1001) exited with code 3"
    assert lines[2] == "    exception: RuntimeError: boom"
    assert lines[3] == "    last 10 lines of its output:"
    assert lines[4:14] == [f"      | line {i}" for i in range(5, 15)]
    assert "  rank 0 (local rank 0) was stopped by the agent" in lines
    assert (
        "  rank 2 (local rank 2, pid 1002) was killed by SIGKILL: killed from outside, often by "
        "the out-of-memory killer (see `dmesg`)"
    ) in lines


def test_a_lone_sigterm_is_still_the_root_cause(tmp_path: Path):
    failures = {4: failure(tmp_path, 4, -signal.SIGTERM, timestamp=5)}
    assert root_cause(failures) == 4
    assert "rank 4 (local rank 4, pid 1004) was killed by SIGTERM" in format_failure_summary(
        failures, 0
    )


def test_each_failed_rank_gets_its_real_reason(tmp_path: Path):
    failures = {
        0: failure(tmp_path, 0, -signal.SIGABRT, timestamp=1),
        1: failure(tmp_path, 1, 7, timestamp=2),
    }
    text = format_failure_summary(failures, machine_rank=0, hang_table="rank  where\n0     x")
    assert (
        "rank 0 (local rank 0, pid 1000) was killed by SIGABRT: it aborted in native code" in text
    )
    assert "rank 1 (local rank 1, pid 1001) exited with code 7 without a Python exception" in text
    assert text.endswith(
        "  where each rank was in its collectives at the end:\n  rank  where\n  0     x\n"
    )
