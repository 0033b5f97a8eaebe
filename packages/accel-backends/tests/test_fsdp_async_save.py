"""``save_state(async_save=True)`` under FSDP2 on 2 real processes (gloo, CPU), sharded and full
state dicts: training goes on while the checkpoint is written (timestamps, no sleeps), what is
written equals a synchronous save of the same state, and a SIGKILL in the middle of the write
leaves the previous checkpoint as the one ``load_state()`` resumes from."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from state_equality import assert_same
from worker_env import worker_env

from accel_core.checkpointing import folders
from accel_core.checkpointing.manifest import MANIFEST
from accel_testing.processes import run_workers

pytestmark = [pytest.mark.multiprocess]

WORKERS = Path(__file__).parent / "fsdp_async_workers.py"
KINDS = ["sharded", "full"]


def _run(function: str, args: list[str], *, check: bool = True) -> list[Any]:
    return run_workers(
        2,
        function=f"{WORKERS}::{function}",
        args=args,
        env=worker_env(),
        timeout=180,
        check=check,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_async_save_overlaps_training_and_writes_what_a_sync_save_writes(tmp_path, kind):
    _run("overlap_and_equality", [str(tmp_path), kind])
    results = json.loads((tmp_path / "results.json").read_text())
    # The steps after save_state(async_save=True) finished before its write did, and the
    # checkpoint was not in place yet when they had.
    assert results["step_end_before_write_end"] is True
    assert results["folder_at_step_end"] is False
    # A synchronous save writes on the training thread over the default group; an
    # asynchronous one in the saver's thread, its collectives over its own group of both.
    sync = {"own_group": False, "ranks": None, "thread": "MainThread"}
    background = {"own_group": True, "ranks": [0, 1], "thread": "accel-async-save"}
    assert results["groups"] == [sync, background] * 2
    # DCP saves the model, then the optimizer, over the group it was handed.
    dcp_groups = [sync, sync, background, background] * 2 if kind == "sharded" else []
    assert results["dcp_groups"] == dcp_groups
    # The second save copied into the first one's CPU buffers (DTensor shards included).
    assert results["buffers"] > 0 and results["buffers_reused"] is True
    for pair in ("1", "2"):
        sync, asynchronous = tmp_path / f"sync_{pair}", tmp_path / f"async_{pair}"
        assert _listed(sync) == _listed(asynchronous)
        assert_same(_contents(sync), _contents(asynchronous))
    if kind == "sharded":
        assert any(name.endswith(".distcp") for name in _listed(tmp_path / "async_1"))
    else:
        assert "model.safetensors" in _listed(tmp_path / "async_1")


@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_during_the_async_write_keeps_the_previous_checkpoint(tmp_path, kind):
    results = _run("killed_during_write", [str(tmp_path), kind], check=False)
    codes = [result.returncode for result in results]
    assert codes == [-signal.SIGKILL] * 2, [result.stderr[-3000:] for result in results]
    checkpoints = tmp_path / "checkpoints"
    partial = folders.temporary_folder(checkpoints / "checkpoint_1")
    # Killed in the middle of the write: its files are there, its manifest and rename are not.
    assert (partial / "killed_0").is_file() and (partial / "killed_1").is_file()
    assert not (partial / MANIFEST).exists()
    assert not (checkpoints / "checkpoint_1").exists()
    assert folders.latest_checkpoint(checkpoints) == checkpoints / "checkpoint_0"

    _run("resume_after_kill", [str(tmp_path), kind])
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed == {"loaded": True, "continued": True, "next_folder": "checkpoint_1"}
    assert (checkpoints / "checkpoint_1" / MANIFEST).is_file()
    assert not partial.exists()


def _listed(folder: Path) -> list[str]:
    return sorted(json.loads((folder / MANIFEST).read_text())["files"])


def _contents(folder: Path) -> dict[str, Any]:
    """Every file of a checkpoint, read: a DCP folder as one state dict, safetensors and
    ``torch.save`` files as what they hold."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    contents: dict[str, Any] = {}
    for name in _listed(folder):
        path = folder / name
        if "/" in name:  # a DCP folder (pytorch_model_fsdp_0/, optimizer_0/)
            top = name.split("/")[0]
            if top not in contents:
                converted = folder.parent / f"{folder.name}_{top}.pt"
                dcp_to_torch_save(folder / top, converted)
                contents[top] = torch.load(converted, weights_only=False)
        elif name.endswith(".safetensors"):
            contents[name] = load_file(path)
        else:
            contents[name] = torch.load(path, weights_only=False)
    return contents
