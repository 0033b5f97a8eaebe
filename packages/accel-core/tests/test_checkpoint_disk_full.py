"""A checkpoint that doesn't fit: the free-space check before writing, and a real full disk
(``/dev/full``) mid-save, synchronous and in the background. Each error names the cause, the
partial folder is removed, and the previous checkpoint stays whole."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest
import torch

from accel_core import Accelerator
from accel_core.checkpointing import CheckpointError, Manifest, disk_space
from accel_core.checkpointing.errors import failure_text

needs_dev_full = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.exists("/dev/full"),
    reason="/dev/full (writes fail with ENOSPC) is Linux's",
)


def _setup():
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    return accelerator


def _fill_on_write(accelerator: Accelerator, name: str) -> None:
    """Make ``name`` in the checkpoint being written a link to /dev/full (a save pre-hook runs
    after the temporary folder exists and before anything is written into it)."""

    def hook(models, weights, folder):
        os.symlink("/dev/full", Path(folder) / name)

    accelerator.register_save_state_pre_hook(hook)


def _previous(tmp_path: Path, accelerator: Accelerator) -> tuple[Path, dict[str, bytes]]:
    target = tmp_path / "ckpt"
    accelerator.save_state(target)
    return target, {p.name: p.read_bytes() for p in sorted(target.iterdir())}


def test_the_free_space_check_refuses_before_anything_is_written(tmp_path, monkeypatch):
    accelerator = _setup()
    target, before = _previous(tmp_path, accelerator)
    needed = 64 * 65 * 4 * 3  # weights, exp_avg, exp_avg_sq (float32)
    monkeypatch.setattr(disk_space, "free_bytes", lambda folder: needed // 2)
    with pytest.raises(CheckpointError) as caught:
        accelerator.save_state(target)
    message = str(caught.value)
    assert f"save_state needs about {(needed + disk_space.OVERHEAD_BYTES) / 1e6:,.1f} MB" in message
    assert f"rank 0's files in {tmp_path}" in message
    assert f"has {needed // 2 / 1e6:,.1f} MB free; nothing was written" in message
    assert "the previous checkpoint is unchanged" in message
    assert {p.name: p.read_bytes() for p in sorted(target.iterdir())} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no partial folder left


def test_tensor_bytes_counts_each_storage_once():
    weight = torch.zeros(10, 10)
    assert disk_space.tensor_bytes({"a": weight, "b": [weight, weight[0]], "c": (1, "x")}) == 400
    assert disk_space.tensor_bytes([torch.zeros(3, dtype=torch.float64), torch.empty(0)]) == 24
    assert disk_space.tensor_bytes({"meta": torch.empty(1000, device="meta")}) == 0


@needs_dev_full
def test_a_full_disk_mid_save_names_the_file_and_the_cause(tmp_path):
    accelerator = _setup()
    target, before = _previous(tmp_path, accelerator)
    _fill_on_write(accelerator, "random_states_0.pkl")
    with pytest.raises(CheckpointError) as caught:
        accelerator.save_state(target)
    message = str(caught.value)
    assert f"save_state could not write {target}; the previous checkpoint is unchanged" in message
    assert "random_states_0.pkl failed: OSError: [Errno 28] No space left on device" in message
    assert {p.name: p.read_bytes() for p in sorted(target.iterdir())} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    Manifest.read(target).verify(target)


@needs_dev_full
def test_a_full_disk_under_async_save_reaches_wait_for_checkpoint(tmp_path):
    accelerator = _setup()
    target, before = _previous(tmp_path, accelerator)
    _fill_on_write(accelerator, "optimizer.bin")
    accelerator.save_state(target, async_save=True)
    with pytest.raises(RuntimeError, match="asynchronous save_state failed") as caught:
        accelerator.wait_for_checkpoint()
    assert "optimizer.bin failed: OSError: [Errno 28] No space left on device" in str(caught.value)
    assert {p.name: p.read_bytes() for p in sorted(target.iterdir())} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    accelerator.end_training()


def test_failure_text_puts_the_os_error_first():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            # torch raises this way: the OSError is the context, not the cause.
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos\nx")  # noqa: B904
    except RuntimeError as error:
        text = failure_text(error)
    assert text == (
        "OSError: [Errno 28] No space left on device (then RuntimeError: [enforce fail at "
        "inline_container.cc:672] . unexpected pos)"
    )
    assert failure_text(ValueError("plain")) == "ValueError: plain"
