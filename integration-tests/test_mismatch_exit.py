"""A debug-mode mismatch through ``accel launch``: every rank raises, the job exits 1 with each
rank's reason, and no rank dies by SIGABRT (they used to, rc 134, after the error)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_end_to_end import accel_command

SCRIPT = Path(__file__).parent / "scripts" / "debug_mismatch.py"


@pytest.mark.multiprocess
def test_a_debug_mode_mismatch_exits_one_on_every_rank_without_sigabrt(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "RANK", "WORLD_"))}
    env["OMP_NUM_THREADS"] = "1"
    command = [*accel_command(), "launch", "--quiet", "--cpu", "--debug", "--num_processes", "2"]
    command += ["--log_dir", str(tmp_path / "logs"), str(SCRIPT)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "SIGABRT" not in done.stderr and "terminate called" not in done.stderr
    assert "gather: the ranks passed different shapes or dtypes" in done.stderr
    summary = done.stderr[done.stderr.index("accel launch: the job failed") :]
    # the first rank to fail is reported with its exception; the other either failed the same
    # way or was stopped by the agent once the first had failed
    assert "exited with code 1" in summary
    assert "exception: DistributedOperationException: gather: the ranks passed" in summary
    errors = sorted((tmp_path / "logs").glob("*/attempt_0/*/error.json"))
    assert errors, "no rank wrote its error file"
