"""Preemption and auto-resume in one process: the signal is recorded, the step finishes, the
checkpoint is written at the next batch request and the loop ends with exit code 75; a relaunch
with auto-resume continues as if nothing happened (weights equal bit for bit)."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, ProjectConfiguration
from accel_core.preemption import PREEMPTED_EXIT_CODE, preemption_signal


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, signal.SIGTERM),
        ("SIGUSR1", signal.SIGUSR1),
        ("usr2", signal.SIGUSR2),
        ("10", signal.SIGUSR1),
        ("none", None),
        ("off", None),
    ],
)
def test_preemption_signal_variable(text, expected):
    environ = {} if text is None else {"ACCEL_PREEMPTION_SIGNAL": text}
    assert preemption_signal(environ) == expected


def test_a_bad_signal_name_is_an_error():
    with pytest.raises(ValueError, match="ACCEL_PREEMPTION_SIGNAL='SIGNOPE' is not a signal"):
        preemption_signal({"ACCEL_PREEMPTION_SIGNAL": "SIGNOPE"})


def _train(project, signal_at: int | None = None) -> tuple[torch.nn.Module, list[int]]:
    """Two epochs of 6 batches; sends SIGTERM to itself before step ``signal_at``."""
    torch.manual_seed(0)
    features = torch.randn(24, 3, generator=torch.Generator().manual_seed(1))
    targets = features.sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(features, targets), batch_size=4, shuffle=True)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps: list[int] = []
    try:
        for _epoch in range(2):
            for inputs, labels in loader:
                if len(steps) == signal_at:
                    os.kill(os.getpid(), signal.SIGTERM)
                loss = torch.nn.functional.mse_loss(model(inputs), labels)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                steps.append(loader.progress.batches)
    finally:
        if accelerator._preemption is not None:
            accelerator._preemption.uninstall()
    return accelerator.unwrap_model(model), steps


def test_sigterm_finishes_the_step_saves_and_auto_resume_continues(tmp_path, monkeypatch):
    reference, _ = _train(tmp_path / "uninterrupted")
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    with pytest.raises(SystemExit) as stopped:
        _train(tmp_path / "run", signal_at=8)
    assert stopped.value.code == PREEMPTED_EXIT_CODE
    # the step during which the signal came was finished: 9 steps, checkpoint after batch 3
    saved = tmp_path / "run" / "checkpoints" / "checkpoint_0"
    assert (saved / "accel_checkpoint.json").is_file()
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    monkeypatch.setenv("ACCEL_AUTO_RESUME", "1")
    resumed, steps = _train(tmp_path / "run")
    # epoch 0 is iterated empty, epoch 1 continues after its 3 trained batches
    assert steps == [4, 5, 6]
    for name, tensor in reference.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name


def test_preemption_off_leaves_the_signal_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_PREEMPTION_SIGNAL", "none")
    previous = signal.getsignal(signal.SIGTERM)
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    assert accelerator._preemption is None
    assert signal.getsignal(signal.SIGTERM) is previous


def test_auto_resume_needs_a_project_folder(monkeypatch):
    monkeypatch.setenv("ACCEL_AUTO_RESUME", "true")
    with pytest.raises(ValueError, match="ACCEL_AUTO_RESUME is on but the Accelerator has no "):
        Accelerator()


def test_project_dir_variable_opts_a_script_in(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_PROJECT_DIR", str(tmp_path))
    accelerator = Accelerator()
    try:
        assert accelerator.project_configuration.project_dir == str(tmp_path)
        assert accelerator.project_configuration.automatic_checkpoint_naming
        assert accelerator._preemption is not None
    finally:
        accelerator._preemption.uninstall()
