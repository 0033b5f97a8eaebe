"""Checkpoints of the ``xla`` strategy: exact continuation, and plain CPU files.

The files must be those every other strategy writes: a process without torch_xla reads them with
safetensors and ``torch.load(weights_only=True)``. That process is this interpreter with torch_xla
blocked, and also, when ``ACCEL_PLAIN_TORCH_PYTHON`` names one, an interpreter of another torch
(the repository's torch 2.13 venv, say). Needs torch_xla (the ``backend-xla`` session,
``PJRT_DEVICE=CPU``); skipped elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch_xla = pytest.importorskip("torch_xla")
torch_xla.device()  # the XLA runtime must start before any backward pass of the process

import torch  # noqa: E402
from xla_support import LEARNING_RATE, loss_of, make_dataset, make_model, xla_accelerator  # noqa: E402

from accel_core import Accelerator  # noqa: E402
from accel_core.checkpointing import CheckpointError  # noqa: E402
from accel_core.gradient_state import GradientState  # noqa: E402
from accel_core.state import AcceleratorState  # noqa: E402


def _prepared(accelerator, model, shuffle=True):
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = torch.utils.data.DataLoader(make_dataset(), batch_size=4, shuffle=shuffle)
    return accelerator.prepare(model, optimizer, scheduler, loader)


def _train(accelerator, model, optimizer, scheduler, loader, epochs=2, save_at=None, skip=0):
    """Train ``epochs`` epochs, the first one after its first ``skip`` batches (Accelerate's way
    of resuming: ``skip_first_batches``); save a checkpoint after batch ``save_at = (epoch,
    batch, folder)``. The losses after the save (all of them without one)."""
    losses = []
    for epoch in range(epochs):
        batches = accelerator.skip_first_batches(loader, skip) if epoch == 0 and skip else loader
        for index, batch in enumerate(batches):
            loss = loss_of(model, batch)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
            if save_at is not None and (epoch, index) == save_at[:2]:
                accelerator.save_state(save_at[2])
                losses.clear()
    return losses


def test_load_state_continues_exactly(tmp_path):
    """Save after batch 3 of 8 of a shuffled epoch, with dropout (XLA's random generator), then
    train on; a new run (other initial weights) loads the checkpoint and trains to the same end:
    its 13 steps repeat the first run's bit for bit."""
    folder = tmp_path / "checkpoint"
    with xla_accelerator() as accelerator:
        objects = _prepared(accelerator, make_model(dropout=0.3))
        expected_losses = _train(accelerator, *objects, save_at=(0, 2, folder))
        expected = accelerator.get_state_dict(objects[0])
    with xla_accelerator() as accelerator:
        objects = _prepared(accelerator, make_model(seed=7, dropout=0.3))
        accelerator.load_state(folder)
        losses = _train(accelerator, *objects, skip=3)
        weights = accelerator.get_state_dict(objects[0])
    assert len(losses) == 13
    assert losses == expected_losses
    assert all(torch.equal(weights[k], expected[k]) for k in expected)


def test_an_asynchronous_save_holds_the_step_it_was_taken_at(tmp_path):
    """``async_save=True``: the states are CPU copies before training goes on, so the steps
    taken while the background thread writes don't reach the checkpoint."""
    with xla_accelerator() as accelerator:
        objects = _prepared(accelerator, make_model(), shuffle=False)
        _train(accelerator, *objects, epochs=1)
        saved = accelerator.get_state_dict(objects[0])
        accelerator.save_state(tmp_path / "checkpoint", async_save=True)
        _train(accelerator, *objects, epochs=1)
        accelerator.wait_for_checkpoint()
        accelerator.load_state(tmp_path / "checkpoint")
        loaded = accelerator.get_state_dict(objects[0])
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


_READ_PLAINLY = """
import sys
sys.modules["torch_xla"] = None  # no torch_xla here: importing it fails
import torch
from safetensors.torch import load_file
folder, expected_file = sys.argv[1], sys.argv[2]
expected = torch.load(expected_file, weights_only=True)
weights = load_file(f"{folder}/model.safetensors")
optimizer = torch.load(f"{folder}/optimizer.bin", weights_only=True)
scheduler = torch.load(f"{folder}/scheduler.bin", weights_only=True)
assert weights.keys() == expected["weights"].keys(), sorted(weights)
assert all(torch.equal(weights[k], v) for k, v in expected["weights"].items())
assert optimizer["param_groups"] == expected["optimizer"]["param_groups"]
for index, state in expected["optimizer"]["state"].items():
    assert optimizer["state"][index].keys() == state.keys()
    assert all(torch.equal(optimizer["state"][index][k], v) for k, v in state.items())
tensors = [*weights.values()] + [v for s in optimizer["state"].values() for v in s.values()]
assert {t.device.type for t in tensors} == {"cpu"}
assert scheduler["last_epoch"] == expected["last_epoch"]
print("READ", torch.__version__, len(weights), len(optimizer["state"]))
"""


def _plain_interpreters():
    found = [sys.executable]
    other = os.environ.get("ACCEL_PLAIN_TORCH_PYTHON")
    if other:
        found.append(other)
    return found


def test_the_files_are_plain_cpu_files_read_without_torch_xla(tmp_path):
    with xla_accelerator() as accelerator:
        model, optimizer, scheduler, loader = _prepared(accelerator, make_model())
        _train(accelerator, model, optimizer, scheduler, loader, epochs=1)
        folder = accelerator.save_state(tmp_path / "checkpoint")
        expected = {
            "weights": accelerator.get_state_dict(model),
            "optimizer": accelerator.strategy.checkpoint_io.checkpoint_optimizer_states(
                [optimizer]
            )[0],
            "last_epoch": scheduler.scheduler.last_epoch,
        }
    torch.save(expected, tmp_path / "expected.pt")
    for python in _plain_interpreters():
        result = subprocess.run(
            [python, "-c", _READ_PLAINLY, folder, str(tmp_path / "expected.pt")],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, (python, result.stderr[-3000:])
        assert result.stdout.startswith("READ "), result.stdout


class _Tied(torch.nn.Module):
    """An embedding and an output layer sharing one weight."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Linear(3, 5, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))


def _checkpoint_layout(folder):
    from safetensors import safe_open

    with safe_open(f"{folder}/model.safetensors", "pt") as handle:
        header = {
            k: (handle.get_slice(k).get_dtype(), handle.get_slice(k).get_shape())
            for k in handle.keys()  # noqa: SIM118 - a safetensors handle, not a dict
        }
        metadata = handle.metadata()
    optimizer = torch.load(f"{folder}/optimizer.bin", weights_only=True)
    files = sorted(p.name for p in folder.iterdir() if p.name != "accel_checkpoint.json")
    return files, header, metadata, optimizer["param_groups"], sorted(optimizer["state"])


def _save_tied(accelerator, folder):
    model = _Tied()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    ids = torch.tensor([0, 3, 4], device=accelerator.device)
    accelerator.backward(model(ids).square().mean())
    optimizer.step()
    accelerator.save_state(folder)
    return model


def test_the_layout_is_the_single_device_strategys(tmp_path):
    """The same tied model saved by ``single_device`` on CPU and by ``xla``: the same files, the
    same safetensors keys (the tied weight once), dtypes, shapes, metadata and optimizer layout;
    and the XLA checkpoint loads back into the tied model."""
    try:
        _save_tied(Accelerator(strategy="single_device", cpu=True), tmp_path / "cpu")
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    with xla_accelerator() as accelerator:
        model = _save_tied(accelerator, tmp_path / "xla")
        saved = accelerator.get_state_dict(model)
        with torch.no_grad():
            model.embed.weight.zero_()
        accelerator.load_state(tmp_path / "xla")
        assert model.out.weight is model.embed.weight
        assert torch.equal(model.out.weight.cpu(), saved["embed.weight"])
    expected = _checkpoint_layout(tmp_path / "cpu")
    assert _checkpoint_layout(tmp_path / "xla") == expected
    assert list(expected[1]) == ["embed.weight"]


def test_save_model_and_get_state_dict_give_cpu_tensors(tmp_path):
    from safetensors.torch import load_file

    with xla_accelerator() as accelerator:
        model = accelerator.prepare(make_model())
        state = accelerator.get_state_dict(model)
        accelerator.save_model(model, tmp_path / "saved")
        assert {p.device.type for p in model.parameters()} == {"xla"}  # the model stays
    assert {v.device.type for v in state.values()} == {"cpu"}
    written = load_file(tmp_path / "saved" / "model.safetensors")
    assert written.keys() == state.keys()
    assert all(torch.equal(written[k], state[k]) for k in state)


def test_saving_inside_an_accumulation_cycle_is_a_clear_error(tmp_path):
    with xla_accelerator(gradient_accumulation_steps=2) as accelerator:
        model, optimizer, _, loader = _prepared(accelerator, make_model())
        with accelerator.accumulate(model):
            accelerator.backward(loss_of(model, next(iter(loader))))
            optimizer.step()
        with pytest.raises(CheckpointError, match="inside a gradient accumulation cycle"):
            accelerator.save_state(tmp_path / "checkpoint")
        assert not (tmp_path / "checkpoint").exists()


def test_a_checkpoint_of_another_model_changes_nothing(tmp_path):
    with xla_accelerator() as accelerator:
        accelerator.prepare(torch.nn.Linear(4, 2))
        accelerator.save_state(tmp_path / "other")
    with xla_accelerator() as accelerator:
        model = accelerator.prepare(make_model())
        before = accelerator.get_state_dict(model)
        with pytest.raises(CheckpointError, match=r"missing keys '0.weight', '0.bias'"):
            accelerator.load_state(tmp_path / "other")
        after = accelerator.get_state_dict(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
