"""Cases that cross packages and processes: ``accel launch`` (accel-launch) starts workers whose
``Accelerator`` (accel-core) and collectives (accel-ops) are reached through the meta-package.

The cases are data; one runner launches each for real with the ``accel`` command on gloo.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parent.parent
SCRIPTS = Path(__file__).parent / "scripts"


@dataclass(frozen=True)
class Case:
    name: str
    processes: int
    script: Path
    launch_flags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    expect: str = ""  # regex that stdout must match


CASES = [
    Case(
        "ops tour, 2 processes", 2, ROOT / "examples" / "ops_tour.py", expect=r"reduce\(sum\).*3\.0"
    ),
    Case(
        "ops tour, 3 processes", 3, ROOT / "examples" / "ops_tour.py", expect=r"reduce\(sum\).*6\.0"
    ),
    Case(
        "digits classifier, 2 processes",
        2,
        ROOT / "examples" / "train_digits.py",
        expect=r"accuracy",
    ),
]


def accel_command() -> list[str]:
    found = shutil.which("accel", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "accel_launch"]


def launch(case: Case, out: Path) -> subprocess.CompletedProcess:
    command = [
        *accel_command(),
        "launch",
        "--num_processes",
        str(case.processes),
        *case.launch_flags,
        str(case.script),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(out), **case.env}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case, tmp_path):
    done = launch(case, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(case.expect, done.stdout), done.stdout


def single_process_reference(global_batch: int) -> dict[str, torch.Tensor]:
    """The quicktour loop in plain PyTorch, one process, the whole global batch per step."""
    torch.manual_seed(0)
    features = torch.randn(96, 8)
    targets = features @ torch.arange(1.0, 9.0) + 0.5
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _epoch in range(3):
        for start in range(0, 96, global_batch):
            optimizer.zero_grad()
            out = model(features[start : start + global_batch]).squeeze(-1)
            torch.nn.functional.mse_loss(out, targets[start : start + global_batch]).backward()
            optimizer.step()
    return model.state_dict()


@pytest.mark.multiprocess
@pytest.mark.parametrize("processes", [1, 3])
def test_quicktour_loop_matches_single_process_pytorch(processes, tmp_path):
    case = Case(
        f"quicktour on {processes}",
        processes,
        SCRIPTS / "quicktour_loop.py",
        env={"PER_RANK_BATCH": str(24 // processes)},
    )
    done = launch(case, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = torch.load(tmp_path / "weights.pt")
    expected = single_process_reference(global_batch=24)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6)
