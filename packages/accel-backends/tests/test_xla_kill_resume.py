"""Exact resumption after SIGKILL under the ``xla`` strategy: one process on XLA's CPU device
(several replicas can't run there, see test_xla_processes.py) killed mid-epoch after its latest
checkpoint and resumed from it ends with the same weights, bit for bit, as the run left alone:
dropout (XLA's own generator), shuffling, gradient accumulation and a scheduler. The job is
resumable_backend_job.py, which the other backends' SIGKILL tests run. Needs torch_xla (the
``backend-xla`` session); skipped elsewhere."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

pytest.importorskip("torch_xla")

from accel_testing import run_workers

JOB = Path(__file__).parent / "resumable_backend_job.py"

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _run(project: Path, *options: str, killed: bool = False) -> None:
    # checkpoints every 4 batches: at the end of an accumulation cycle (XLA refuses mid-cycle)
    env = {"PJRT_DEVICE": "CPU", "CHECKPOINT_EVERY": "4"}
    results = run_workers(
        1, script=JOB, args=[str(project), "xla", *options], check=not killed, env=env, timeout=300
    )
    if killed:
        assert [r.returncode for r in results] == [-signal.SIGKILL], results[0].stderr[-2000:]


def test_killed_and_resumed_xla_run_matches_the_uninterrupted_one(tmp_path):
    _run(tmp_path / "reference")
    # killed at batch 18: in epoch 2, two batches after the save at batch 16 (mid-epoch)
    _run(tmp_path / "resumed", "--die-after", "18", killed=True)
    _run(tmp_path / "resumed", "--resume")
    reference = torch.load(tmp_path / "reference" / "final_weights.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed" / "final_weights.pt", weights_only=True)
    assert resumed["batches"] == reference["batches"] == 24  # 2 epochs of 12 batches, 1 process
    assert resumed["step"] == reference["step"]
    assert torch.equal(resumed["weights"], reference["weights"])
