"""Exact resumption after SIGKILL under each backend strategy, on 2 real gloo processes.

A run killed mid-epoch after its latest checkpoint and resumed from it must end with the same
weights, bit for bit, as the same run left alone: dropout, shuffling, gradient accumulation (2
batches) and a scheduler included. With 6 batches per process per epoch, checkpoints every 5
batches fall inside an accumulation cycle, every 4 at its end.

- FSDP2 resumes exactly from sharded (DCP) and full checkpoints, mid-cycle ones included (the
  unreduced gradients FSDP2 holds are saved per rank).
- FSDP1 resumes exactly from sharded checkpoints taken at the end of a cycle (inside one it
  warns, as DeepSpeed does: its flat parameters keep the cycle's gradients).
- DeepSpeed resumes exactly from engine checkpoints taken at the end of a cycle (ZeRO-2, ZeRO-3).
  Its engine can't save a cycle's gradients: a mid-cycle save warns that the resumed run goes on
  without them, and it does.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from accel_testing import run_workers

JOB = Path(__file__).parent / "resumable_backend_job.py"
WARNING = "save_state inside a gradient accumulation cycle under DeepSpeed"

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

#: (strategy, checkpoint every N batches, kill after batch K); DeepSpeed's cases skip where it
#: isn't installed (tests-accel-backends), and backend-deepspeed runs them.
CASES = [
    ("fsdp", 5, 8),
    ("fsdp-full", 5, 8),
    ("fsdp1", 4, 7),
    ("deepspeed2", 4, 7),
    ("deepspeed3", 4, 7),
]


def _run(project: Path, strategy: str, every: int, *options: str, killed: bool = False) -> str:
    env = {"DS_ACCELERATOR": "cpu", "CHECKPOINT_EVERY": str(every)}
    args = [str(project), strategy, *options]
    results = run_workers(2, script=JOB, args=args, check=not killed, env=env, timeout=240)
    if killed:
        codes = [result.returncode for result in results]
        assert codes == [-signal.SIGKILL] * 2, [r.stderr[-2000:] for r in results]
    return results[0].stderr


def _final(project: Path) -> dict:
    return torch.load(project / "final_weights.pt", weights_only=True)


@pytest.mark.parametrize(("strategy", "every", "die_after"), CASES)
def test_killed_and_resumed_run_matches_the_uninterrupted_one(tmp_path, strategy, every, die_after):
    if strategy.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    _run(tmp_path / "reference", strategy, every)
    killed = _run(tmp_path / "resumed", strategy, every, "--die-after", str(die_after), killed=True)
    _run(tmp_path / "resumed", strategy, every, "--resume")
    reference, resumed = _final(tmp_path / "reference"), _final(tmp_path / "resumed")
    assert resumed["batches"] == reference["batches"] == 12
    assert resumed["step"] == reference["step"]
    assert torch.equal(resumed["weights"], reference["weights"])
    assert WARNING not in killed


def test_deepspeed_mid_cycle_save_warns_and_the_resumed_run_lacks_that_gradient(tmp_path):
    pytest.importorskip("deepspeed")
    _run(tmp_path / "reference", "deepspeed2", 5)
    killed = _run(tmp_path / "resumed", "deepspeed2", 5, "--die-after", "8", killed=True)
    _run(tmp_path / "resumed", "deepspeed2", 5, "--resume")
    assert WARNING in killed
    reference, resumed = _final(tmp_path / "reference"), _final(tmp_path / "resumed")
    assert resumed["step"] == reference["step"]
    assert not torch.equal(resumed["weights"], reference["weights"])  # batch 5's gradient lost
