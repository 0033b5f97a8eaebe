"""Several XLA devices on CPU: SPMD trains over two; several replicas are a clear error, not a hang.

Measured with torch_xla 2.9 (see accel_backends.xla.runtime): two replicas of ``torch_xla.launch``
on the CPU device abort in XLA's all-reduce rendezvous after 10 s, and torchrun processes on the
CPU device each get an XLA world of their own. SPMD (one process, ``CPU_NUM_DEVICES=2``) works.
Each case runs in fresh interpreters (SPMD can't be switched off in a process).
Needs torch_xla (the ``backend-xla`` session, ``PJRT_DEVICE=CPU``); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_xla")

from xla_support import ATOL

from accel_testing import run_workers

WORKERS = Path(__file__).with_name("xla_workers.py")


def _run(case: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKERS), case],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PJRT_DEVICE": "CPU", **env},
    )


def test_two_replicas_on_the_cpu_device_are_refused_before_any_collective():
    result = _run("launch", CPU_NUM_DEVICES="2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("REPLICA"))
    assert [line.split(" ERROR ")[0] for line in lines] == ["REPLICA 0", "REPLICA 1"], lines
    for line in lines:
        assert "torch_xla runs 2 replicas on its CPU device" in line
        assert "XLAStrategy(spmd=True)" in line
    assert "Termination timeout" not in result.stderr


def test_torchrun_processes_on_the_cpu_device_are_refused():
    """Two processes with WORLD_SIZE=2: accel's process group has 2, torch_xla sees 1 each."""
    results = run_workers(
        2,
        script=WORKERS,
        args=["mismatch"],
        env={"PJRT_DEVICE": "CPU", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        timeout=240,
    )
    for result in results:
        expected = (
            f"RANK {result.rank} ERROR strategy 'xla': this job has 2 process(es) (WORLD_SIZE; "
            f"this is rank {result.rank}), but torch_xla sees 1 replica(s) on CPU"
        )
        assert expected in result.stdout, (result.stdout, result.stderr[-2000:])
        assert "own world" in result.stdout


def test_spmd_trains_over_two_cpu_devices_as_one_device_on_the_global_batch():
    """2 epochs of 4 AdamW steps on batches of 8, each split 4 + 4 over the two devices: the
    weights equal plain PyTorch's on the whole batches within ``ATOL`` (XLA's compiler adds the
    two halves' gradients with an all-reduce: rounding differs, the mathematics does not), and
    ``save_state`` / ``load_state`` bring them back exactly."""
    result = _run("spmd", CPU_NUM_DEVICES="2")
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    assert report["devices"] == 2 and report["num_processes"] == 1
    assert report["shardings"] == ["{devices=[2,1]0,1}"]  # every input split along dim 0
    assert report["max_difference"] <= ATOL
    assert report["losses"][1] < report["losses"][0]
    assert report["gathered"] == [1.0, 2.0] and report["reduced"] == [1.0, 2.0]
    assert report["reloaded_exactly"]
