"""save_accelerator_state / load_accelerator_state / save_custom_state / load_custom_state."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from accel_core.checkpointing import CheckpointError
from accel_core.checkpointing.state_functions import (
    load_accelerator_state,
    load_custom_state,
    save_accelerator_state,
    save_custom_state,
)
from accel_ops import PartialState


@pytest.fixture(autouse=True)
def state():
    PartialState._reset_state()
    yield PartialState(cpu=True)
    PartialState._reset_state()


class Counter:
    def __init__(self, value: int = 0) -> None:
        self.value = value

    def state_dict(self) -> dict:
        return {"value": self.value, "history": [self.value] * 2}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def _training_objects(seed: int):
    torch.manual_seed(seed)
    first, second = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)
    sgd = torch.optim.SGD(first.parameters(), lr=0.1, momentum=0.9)
    adam = torch.optim.Adam(second.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)
    return [first, second], [sgd, adam], [scheduler]


def _train_one_step(models, optimizers, schedulers) -> None:
    loss = models[1](models[0](torch.randn(4, 3))).sum()
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
    for scheduler in schedulers:
        scheduler.step()


# The files Accelerate 1.15's save_accelerator_state + save_custom_state(obj, dir, 3) write for two
# models, two optimizers, a scheduler, a plain DataLoader and a GradScaler (measured).
ACCELERATE_SAFETENSORS_FILES = [
    "custom_checkpoint_3.pkl",
    "model.safetensors",
    "model_1.safetensors",
    "optimizer.bin",
    "optimizer_1.bin",
    "random_states_0.pkl",
    "scaler.pt",
    "scheduler.bin",
]
ACCELERATE_BIN_FILES = [
    "custom_checkpoint_3.pkl",
    "optimizer.bin",
    "optimizer_1.bin",
    "pytorch_model.bin",
    "pytorch_model_1.bin",
    "random_states_0.pkl",
    "scaler.pt",
    "scheduler.bin",
]


@pytest.mark.parametrize(
    ("safe", "expected"), [(True, ACCELERATE_SAFETENSORS_FILES), (False, ACCELERATE_BIN_FILES)]
)
def test_writes_accelerates_file_names(tmp_path, safe, expected):
    models, optimizers, schedulers = _training_objects(0)
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    returned = save_accelerator_state(
        tmp_path / "ckpt",
        [m.state_dict() for m in models],
        optimizers,
        schedulers,
        [loader],
        process_index=0,
        step=7,
        scaler=torch.amp.GradScaler("cpu"),
        safe_serialization=safe,
    )
    save_custom_state(Counter(5), tmp_path / "ckpt", index=3)
    assert returned == tmp_path / "ckpt"
    assert sorted(os.listdir(returned)) == expected


def test_round_trip_restores_every_state_and_returns_the_step(tmp_path):
    models, optimizers, schedulers = _training_objects(0)
    _train_one_step(models, optimizers, schedulers)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    save_accelerator_state(
        tmp_path, [m.state_dict() for m in models], optimizers, schedulers, [], 0, 42, scaler=scaler
    )
    expected_draws = (random.random(), np.random.rand(), torch.rand(1).item())

    fresh_models, fresh_optimizers, fresh_schedulers = _training_objects(1)
    fresh_scaler = torch.amp.GradScaler("cpu")
    overrides = load_accelerator_state(
        tmp_path, fresh_models, fresh_optimizers, fresh_schedulers, [], 0, scaler=fresh_scaler
    )
    assert overrides == {"step": 42}
    for saved, loaded in zip(models, fresh_models, strict=True):
        for key, value in saved.state_dict().items():
            assert torch.equal(loaded.state_dict()[key], value), key
    momentum = fresh_optimizers[0].state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, optimizers[0].state_dict()["state"][0]["momentum_buffer"])
    assert fresh_optimizers[1].state_dict()["state"][0]["step"] == 1
    assert fresh_schedulers[0].last_epoch == 1 and fresh_schedulers[0].get_last_lr() == [0.05]
    assert fresh_scaler.get_scale() == 1024.0
    # the RNG states are those at save time: the next draws repeat
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected_draws


def test_mismatched_model_is_refused_before_anything_changes(tmp_path):
    models, optimizers, _ = _training_objects(0)
    save_accelerator_state(tmp_path, [m.state_dict() for m in models], optimizers, [], [], 0, 1)
    other = [torch.nn.Linear(3, 2), torch.nn.Linear(2, 5)]
    before = other[0].weight.detach().clone()
    with pytest.raises(
        CheckpointError,
        match=r"model_1\.safetensors: key 'bias' has shape \(1,\), the model's has \(5,\)",
    ):
        load_accelerator_state(tmp_path, other, [], [], [], 0)
    assert torch.equal(other[0].weight, before)


def test_missing_random_states_are_skipped_and_no_step_is_returned(tmp_path, caplog):
    models, _, _ = _training_objects(0)
    save_accelerator_state(tmp_path, [models[0].state_dict()], [], [], [], 0, 3)
    (tmp_path / "random_states_0.pkl").unlink()
    with caplog.at_level("INFO", logger="accel_core.checkpointing.state_functions"):
        assert load_accelerator_state(tmp_path, [models[0]], [], [], [], 0) == {}
    assert "Could not load random states" in caplog.text


def test_argument_errors(tmp_path):
    with pytest.raises(TypeError, match=r"map_location='cuda:3'.*'on_device'"):
        load_accelerator_state(tmp_path, [], [], [], [], 0, map_location="cuda:3")
    with pytest.raises(TypeError, match=r"\['assign'\].*only strict"):
        load_accelerator_state(tmp_path, [], [], [], [], 0, assign=True)
    with pytest.raises(CheckpointError, match="is not a folder"):
        load_accelerator_state(tmp_path / "nowhere", [], [], [], [], 0)


def test_only_the_main_process_writes_shared_files_but_every_rank_its_rng(tmp_path, monkeypatch):
    monkeypatch.setattr(PartialState, "is_main_process", property(lambda self: False))
    models, optimizers, _ = _training_objects(0)
    save_accelerator_state(tmp_path, [models[0].state_dict()], optimizers[:1], [], [], 3, 9)
    assert os.listdir(tmp_path) == ["random_states_3.pkl"]


def test_custom_state_round_trip_and_the_weights_only_opt_in(tmp_path):
    save_custom_state(Counter(7), tmp_path, index=2)
    loaded = Counter()
    load_custom_state(loaded, tmp_path, index=2)
    assert loaded.value == 7

    class Pickled:
        def state_dict(self) -> dict:
            return {"value": Counter(3)}  # an arbitrary object: refused by weights_only=True

        def load_state_dict(self, state: dict) -> None:
            self.value = state["value"].value

    save_custom_state(Pickled(), tmp_path, index=0)
    target = Pickled()
    with pytest.raises(CheckpointError, match="pass weights_only=False for a file you trust"):
        load_custom_state(target, tmp_path)
    load_custom_state(target, tmp_path, weights_only=False)
    assert target.value == 3
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_9.pkl is missing"):
        load_custom_state(loaded, tmp_path, index=9)


def test_a_stale_manifest_is_removed_when_the_folder_is_rewritten(tmp_path):
    (tmp_path / "accel_checkpoint.json").write_text("{}")
    models, _, _ = _training_objects(0)
    save_accelerator_state(tmp_path, [models[0].state_dict()], [], [], [], 0, 1)
    assert not (tmp_path / "accel_checkpoint.json").exists()
    assert load_accelerator_state(tmp_path, [models[0]], [], [], [], 0) == {"step": 1}


def test_reads_a_save_state_folder_checking_its_manifest(tmp_path):
    from accel_core import Accelerator

    PartialState._reset_state()
    accelerator = Accelerator(cpu=True)
    models, optimizers, _ = _training_objects(0)
    model, _ = accelerator.prepare(models[0], optimizers[0])
    folder = accelerator.save_state(tmp_path / "ckpt")
    fresh = torch.nn.Linear(3, 2)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    assert load_accelerator_state(folder, [fresh], [fresh_optimizer], [], [], 0) == {"step": 0}
    assert torch.equal(fresh.weight, model.weight)
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")  # same size, other bytes
    with pytest.raises(CheckpointError, match=r"model.safetensors"):
        load_accelerator_state(folder, [fresh], [fresh_optimizer], [], [], 0)


def test_load_reads_random_states_through_the_numpy_allow_list(tmp_path):
    from accel_core import TORCH_SAFE_GLOBALS, load

    save_accelerator_state(tmp_path, [], [], [], [], 0, 5)
    target = tmp_path / "random_states_0.pkl"
    with pytest.raises(Exception, match="numpy"):  # plain weights_only=True refuses numpy arrays
        torch.load(target, weights_only=True)
    states = load(target)
    assert states["step"] == 5 and isinstance(states["numpy_random_seed"][1], np.ndarray)
    assert np.ndarray in TORCH_SAFE_GLOBALS and np.dtype in TORCH_SAFE_GLOBALS
