"""``save_state(async_save=True)`` under the deepspeed strategy on 2 real processes (gloo, CPU),
ZeRO-2 and ZeRO-3, float32 and bf16: DeepSpeed's save is taken in the call and its files are
written in the background while training goes on (timestamps, no sleeps); every file equals
DeepSpeed's own ``save_checkpoint`` and a synchronous save of the same state, and a fresh run
continues from it exactly; a SIGKILL during the write leaves the previous checkpoint as the one
``load_state()`` resumes from. Skips where DeepSpeed isn't installed."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepspeed")

import torch
from deepspeed_testing import run
from state_equality import assert_same
from worker_env import worker_env

from accel_core.checkpointing import folders
from accel_core.checkpointing.names import MANIFEST
from accel_testing.processes import run_workers

pytestmark = [pytest.mark.multiprocess]

WORKERS = Path(__file__).parent / "deepspeed_async_workers.py"
RUNS = ("zero2", "zero3", "zero2_bf16")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The folders and results of ``overlap_and_equality`` (one launch for every run)."""
    out = tmp_path_factory.mktemp("deepspeed_async")
    run("overlap_and_equality", out, workers=WORKERS)
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("name", RUNS)
def test_training_goes_on_while_the_files_are_written(saved, name):
    found = saved[1][name]
    # The steps after save_state(async_save=True) finished before its write did, and the
    # checkpoint was not in place yet when they had; the files were written on the saver's
    # thread.
    assert found["step_end_before_write_end"] is True
    assert found["folder_at_step_end"] is False
    assert found["threads"] == ["MainThread", "accel-async-save", "accel-async-save"]
    # The second asynchronous save copied into the first one's CPU buffers.
    assert found["copies"] > 0 and found["copies_reused"] is True


@pytest.mark.parametrize("name", RUNS)
def test_the_files_equal_deepspeeds_own_and_a_synchronous_save(saved, name):
    folder = saved[0] / name
    sync, asynchronous, direct = folder / "sync", folder / "async", folder / "direct"
    listed = _listed(asynchronous)
    assert listed == _listed(sync)
    deepspeed_files = sorted(p.relative_to(direct).as_posix() for p in direct.rglob("*.*"))
    deepspeed_files.append("latest")
    assert set(deepspeed_files) <= set(listed)
    assert any(n.startswith("pytorch_model/") and "optim_states" in n for n in deepspeed_files)
    for file in listed:
        assert_same(_read(sync / file), _read(asynchronous / file), file, key_order=True)
        if file in deepspeed_files:
            assert_same(_read(direct / file), _read(asynchronous / file), file, key_order=True)


@pytest.mark.parametrize("name", RUNS)
def test_a_fresh_run_continues_exactly_from_the_async_checkpoint(saved, name):
    first, second = saved[1][name]["losses"]
    assert len(first) == 2 and first == second


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_sigkill_during_the_async_write_keeps_the_previous_checkpoint(tmp_path, stage):
    results = run_workers(
        2,
        function=f"{WORKERS}::killed_during_write",
        args=[str(tmp_path), str(stage)],
        env=worker_env(),
        timeout=240,
        check=False,
    )
    codes = [result.returncode for result in results]
    assert codes == [-signal.SIGKILL] * 2, [result.stderr[-3000:] for result in results]
    checkpoints = tmp_path / "checkpoints"
    partial = folders.temporary_folder(checkpoints / "checkpoint_1")
    # Killed after writing DeepSpeed's files: they are there, the manifest and rename are not.
    assert (partial / "killed_0").is_file() and (partial / "killed_1").is_file()
    assert any(partial.glob("pytorch_model/*optim_states.pt"))
    assert not (partial / MANIFEST).exists()
    assert not (checkpoints / "checkpoint_1").exists()
    assert folders.latest_checkpoint(checkpoints) == checkpoints / "checkpoint_0"

    run("resume_after_kill", tmp_path, str(stage), workers=WORKERS)
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed == {"continued": True, "next_folder": "checkpoint_1"}
    assert (checkpoints / "checkpoint_1" / MANIFEST).is_file()
    assert not partial.exists()


def _listed(folder: Path) -> list[str]:
    return sorted(json.loads((folder / MANIFEST).read_text())["files"])


def _read(path: Path) -> Any:
    if path.suffix in (".pt", ".bin", ".pkl"):
        return torch.load(path, weights_only=False)
    return path.read_bytes()
