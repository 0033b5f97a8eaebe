"""Checkpoints under faults, on real processes: a save or load called by some ranks only, a
process killed with SIGKILL mid-save, damaged files and manifests, and the per-rank files of a
save on 2 and 3 processes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from accel_core import Accelerator, ProjectConfiguration
from accel_core.checkpointing import Manifest
from accel_testing import run_workers

JOB = Path(__file__).parent / "checkpoint_faults_job.py"

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.mark.parametrize(
    ("operation", "mode"), [("save_state", "main-only"), ("load_state", "load-main-only")]
)
def test_a_call_on_the_main_process_only_is_an_error_not_a_hang(tmp_path, operation, mode):
    started = time.monotonic()
    results = run_workers(
        2,
        script=JOB,
        args=[str(tmp_path), mode],
        env={"ACCEL_PROCESS_GROUP_TIMEOUT": "6"},
        check=False,
        timeout=90,
    )
    assert time.monotonic() - started < 60
    assert [r.returncode for r in results] == [1, 1], [r.stderr[-1500:] for r in results]
    assert f"rank(s) [1] did not call {operation} within 6 s" in results[0].stderr
    assert f"Every process must call {operation}" in results[0].stderr
    # save: nothing was written; load: the save before it is the only checkpoint.
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint_*"))
    assert checkpoints == ([] if operation == "save_state" else ["checkpoint_0"])


@pytest.mark.parametrize("nprocs", [1, 2])
def test_sigkill_mid_save_leaves_the_previous_checkpoint_whole(tmp_path, nprocs):
    results = run_workers(nprocs, script=JOB, args=[str(tmp_path), "kill-mid-save"], check=False)
    assert results[0].returncode == -signal.SIGKILL, results[0].stderr[-1500:]
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        ".checkpoint_1.incomplete",
        "checkpoint_0",
    ]
    previous = checkpoints / "checkpoint_0"
    manifest = Manifest.read(previous)
    manifest.verify(previous)  # every file present with its size and checksum
    assert manifest.world_size == nprocs
    # The half-written checkpoint is not picked by load_state(), nor counted by total_limit.
    accelerator = Accelerator(
        project_config=ProjectConfiguration(
            project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=1
        )
    )
    import torch
    from checkpoint_faults_job import KillWhenPickled

    model = accelerator.prepare(torch.nn.Linear(4, 3))
    accelerator.register_for_checkpointing(KillWhenPickled(armed=False))
    if nprocs == 1:
        accelerator.load_state()
        assert accelerator.save_iteration == 1
        accelerator.save_state()
        assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_1"]
    else:
        with pytest.warns(UserWarning, match="saved by 2 process"):
            accelerator.load_state()  # the 2-process checkpoint, on one process
    torch.manual_seed(0)
    assert torch.equal(model.weight, torch.nn.Linear(4, 3).weight)


def test_a_manifest_only_one_rank_cant_read_is_an_error_on_every_rank(tmp_path):
    results = run_workers(2, script=JOB, args=[str(tmp_path), "manifest-on-rank-1"], timeout=90)
    errors = [line for r in results for line in r.stdout.splitlines() if line.startswith("LOADER")]
    assert [line.split(" ", 2)[1] for line in errors] == ["rank=0", "rank=1"], errors
    messages = {line.split(" ", 2)[2] for line in errors}
    assert len(messages) == 1, messages
    assert "copy_1" in messages.pop()


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_corrupt_file_is_an_error_on_every_rank(tmp_path, nprocs):
    # The ranks split the checksum checks between them; whichever checked a damaged file, every
    # rank must refuse the checkpoint, naming the first damaged file in the same words.
    results = run_workers(nprocs, script=JOB, args=[str(tmp_path), "corrupt"])
    errors = [line for r in results for line in r.stdout.splitlines() if line.startswith("LOADER")]
    assert len(errors) == nprocs, [r.stdout for r in results]
    messages = {line.split(" ", 2)[2] for line in errors}
    assert len(messages) == 1
    assert "is corrupt: its checksum is" in messages.pop()


@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_rank_writes_its_random_states_and_loads_back(tmp_path, nprocs):
    results = run_workers(nprocs, script=JOB, args=[str(tmp_path), "round-trip"])
    lines = [line for r in results for line in r.stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == nprocs and all("same=True" in line for line in lines)
    files = lines[0].split("files=")[1].split(",")
    expected = [f"random_states_{rank}.pkl" for rank in range(nprocs)]
    assert files == sorted(["accel_checkpoint.json", "model.safetensors", *expected])
