"""save_state / load_state in one process: files, round trip, errors that change nothing."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, ProjectConfiguration
from accel_core.checkpointing import CheckpointError


class Counter:
    def __init__(self, value: int = 0) -> None:
        self.value = value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def _setup(project: Path | None = None, **config):
    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=str(project), **config)
        if project is not None
        else None
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)
    loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=2, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    return accelerator, model, optimizer, scheduler, loader


def _train(accelerator, model, optimizer, scheduler, steps: int = 2) -> None:
    for _ in range(steps):
        loss = model(torch.randn(2, 3)).square().mean()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


def test_files_use_accelerate_names_and_the_manifest_lists_them(tmp_path):
    accelerator, model, optimizer, scheduler, _ = _setup()
    accelerator.register_for_checkpointing(Counter(3))
    _train(accelerator, model, optimizer, scheduler)
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "accel_checkpoint.json",
        "custom_checkpoint_0.pkl",
        "model.safetensors",
        "optimizer.bin",
        "random_states_0.pkl",
        "scheduler.bin",
    ]
    manifest = json.loads((folder / "accel_checkpoint.json").read_text())
    assert manifest["world_size"] == 1 and manifest["strategy"] == "single_device"
    for name, record in manifest["files"].items():
        assert (folder / name).stat().st_size == record["size"]
    saved = load_file(folder / "model.safetensors")
    assert torch.equal(saved["0.weight"], model[0].weight.detach())
    rng = torch.load(folder / "random_states_0.pkl", weights_only=False)
    assert set(rng) >= {"step", "random_state", "numpy_random_seed", "torch_manual_seed"}
    assert not list(tmp_path.glob(".*"))  # no temporary folder left behind


def test_round_trip_restores_every_state(tmp_path):
    accelerator, model, optimizer, scheduler, _ = _setup()
    counter = Counter(7)
    accelerator.register_for_checkpointing(counter)
    _train(accelerator, model, optimizer, scheduler)
    accelerator.step = 5
    accelerator.save_state(tmp_path / "ckpt")
    expected = (_weights(model), copy.deepcopy(optimizer.state_dict()), scheduler.get_last_lr())
    draws = (torch.rand(3), random.random(), np.random.rand())

    _train(accelerator, model, optimizer, scheduler, steps=3)
    counter.value, accelerator.step = 0, 0
    accelerator.load_state(tmp_path / "ckpt")
    assert torch.equal(_weights(model), expected[0])
    assert torch.equal(
        optimizer.state_dict()["state"][0]["exp_avg"], expected[1]["state"][0]["exp_avg"]
    )
    assert scheduler.get_last_lr() == expected[2]
    assert counter.value == 7 and accelerator.step == 5
    assert torch.equal(torch.rand(3), draws[0])
    assert random.random() == draws[1] and np.random.rand() == draws[2]


def test_register_for_checkpointing_refuses_objects_without_state_dict():
    accelerator = Accelerator()
    with pytest.raises(
        ValueError, match=r"(?s)^All `objects` must include.*Item at index 1, `object`"
    ):
        accelerator.register_for_checkpointing(Counter(), object())
    assert accelerator._custom_objects == []


def test_pre_hooks_see_the_weights_and_can_be_removed(tmp_path):
    accelerator, *_ = _setup()
    seen = []

    def save_hook(models, weights, output_dir):
        seen.append(("save", len(models), sorted(weights[0]), Path(output_dir).name))
        weights.pop()  # this model is saved some other way

    def load_hook(models, input_dir):
        seen.append(("load", len(models), Path(input_dir).name))
        models.pop()

    save_handle = accelerator.register_save_state_pre_hook(save_hook)
    load_handle = accelerator.register_load_state_pre_hook(load_hook)
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    assert not (folder / "model.safetensors").exists()
    accelerator.load_state(folder)  # the hook took the model out: nothing to load for it
    assert seen[0] == ("save", 1, ["0.bias", "0.weight", "1.bias", "1.weight"], ".ckpt.incomplete")
    assert seen[1] == ("load", 1, "ckpt")
    save_handle.remove()
    load_handle.remove()
    accelerator.save_state(tmp_path / "ckpt2")
    assert (tmp_path / "ckpt2" / "model.safetensors").is_file() and len(seen) == 2


def test_automatic_naming_total_limit_and_numbering_after_resume(tmp_path):
    config = {"automatic_checkpoint_naming": True, "total_limit": 2}
    accelerator, *_ = _setup(tmp_path, **config)
    for _ in range(4):
        accelerator.save_state()
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_2", "checkpoint_3"]
    # A crashed save leaves only a hidden folder: neither counted nor loaded.
    (checkpoints / ".checkpoint_4.incomplete").mkdir()
    accelerator.project_configuration.iteration = 0
    accelerator.load_state()  # the latest complete one
    assert accelerator.save_iteration == 4
    accelerator.save_state()
    assert sorted(p.name for p in checkpoints.iterdir() if not p.name.startswith(".")) == [
        "checkpoint_3",
        "checkpoint_4",
    ]


def test_load_state_without_a_checkpoint_names_what_is_missing(tmp_path):
    accelerator, *_ = _setup(tmp_path, automatic_checkpoint_naming=True)
    with pytest.raises(CheckpointError, match="found no complete checkpoint_<n>"):
        accelerator.load_state()
    (tmp_path / ".half.incomplete").mkdir()
    with pytest.raises(CheckpointError, match="that save never finished"):
        accelerator.load_state(tmp_path / "half")
    with pytest.raises(CheckpointError, match="needs output_dir"):
        Accelerator().save_state()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"optimizer.bin \(written by rank 0\) is missing"),
        ("truncated", r"optimizer.bin is truncated or overwritten: \d+ bytes"),
        ("corrupt", r"optimizer.bin is corrupt: its checksum is \w+ for bytes 0-\d+ \(block 0\)"),
    ],
)
def test_a_damaged_file_is_named_and_nothing_changes(tmp_path, damage, message):
    accelerator, model, optimizer, scheduler, _ = _setup()
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    target = folder / "optimizer.bin"
    data = target.read_bytes()
    if damage == "missing":
        target.unlink()
    elif damage == "truncated":
        target.write_bytes(data[: len(data) // 2])
    else:
        target.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    _train(accelerator, model, optimizer, scheduler)
    before = (_weights(model), scheduler.get_last_lr(), torch.get_rng_state())
    with pytest.raises(CheckpointError, match=message):
        accelerator.load_state(folder)
    assert torch.equal(_weights(model), before[0]) and scheduler.get_last_lr() == before[1]
    assert torch.equal(torch.get_rng_state(), before[2])


def test_another_model_is_refused_naming_the_key_and_shapes(tmp_path):
    accelerator, *_ = _setup()
    accelerator.save_state(tmp_path / "ckpt")
    other = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    model = other.prepare(model)
    before = _weights(model)
    with pytest.raises(
        CheckpointError, match=r"key '0.bias' has shape \(4,\), the model's has \(5,\)"
    ):
        other.load_state(tmp_path / "ckpt")
    assert torch.equal(_weights(model), before)


class Opaque:
    """A registered object whose state holds a class torch.load refuses by default."""

    def __init__(self) -> None:
        self.payload = Counter(1)

    def state_dict(self) -> dict:
        return {"payload": self.payload}

    def load_state_dict(self, state: dict) -> None:
        self.payload = state["payload"]


def test_unpickling_beyond_tensors_needs_an_explicit_opt_in(tmp_path):
    accelerator = Accelerator()
    accelerator.register_for_checkpointing(Opaque())
    accelerator.save_state(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"load_kwargs=\{'weights_only': False\}"):
        accelerator.load_state(tmp_path / "ckpt")
    accelerator.load_state(tmp_path / "ckpt", load_kwargs={"weights_only": False})
    assert accelerator._custom_objects[0].payload.value == 1


def test_registered_object_count_must_match(tmp_path):
    accelerator, *_ = _setup()
    accelerator.register_for_checkpointing(Counter())
    accelerator.save_state(tmp_path / "ckpt")
    other, *_ = _setup()
    with pytest.raises(CheckpointError, match=r"has 1 custom_checkpoint_<i>\.pkl file"):
        other.load_state(tmp_path / "ckpt")


def test_saving_over_an_existing_checkpoint_replaces_it_whole(tmp_path):
    accelerator, model, optimizer, scheduler, _ = _setup()
    accelerator.save_state(tmp_path / "ckpt", safe_serialization=False)
    assert (tmp_path / "ckpt" / "pytorch_model.bin").is_file()
    _train(accelerator, model, optimizer, scheduler)
    accelerator.save_state(tmp_path / "ckpt")
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert "model.safetensors" in names and "pytorch_model.bin" not in names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_async_save_writes_the_state_of_the_call_and_reports_failures(tmp_path):
    accelerator, model, optimizer, scheduler, _ = _setup()
    _train(accelerator, model, optimizer, scheduler)
    expected = _weights(model)
    accelerator.save_state(tmp_path / "async", async_save=True)
    _train(accelerator, model, optimizer, scheduler)  # changes the live weights meanwhile
    accelerator.wait_for_checkpoint()
    saved = load_file(tmp_path / "async" / "model.safetensors")
    assert torch.equal(torch.cat([saved[k].flatten() for k in sorted(saved)]), expected[_order()])

    accelerator.register_for_checkpointing(Unpicklable())
    accelerator.save_state(tmp_path / "broken", async_save=True)
    with pytest.raises(RuntimeError, match="asynchronous save_state failed in the background"):
        accelerator.end_training()
    assert not (tmp_path / "broken").exists()


def _order() -> torch.Tensor:
    # Parameters flattened in model order (0.weight, 0.bias, 1.weight, 1.bias) vs sorted keys
    # (0.bias, 0.weight, 1.bias, 1.weight).
    sizes = {"0.weight": 12, "0.bias": 4, "1.weight": 8, "1.bias": 2}
    offsets, start = {}, 0
    for name in ("0.weight", "0.bias", "1.weight", "1.bias"):
        offsets[name] = torch.arange(start, start + sizes[name])
        start += sizes[name]
    return torch.cat([offsets[name] for name in sorted(sizes)])


class Unpicklable:
    def state_dict(self) -> dict:
        return {"lock": __import__("threading").Lock()}

    def load_state_dict(self, state: dict) -> None:
        pass


def test_accelerate_sampler_file_is_read_without_unpickling_the_dataset(tmp_path):
    from accel_core.checkpointing.safe_load import load_accelerate_sampler
    from accel_core.data_loader import SeedableRandomSampler

    sampler = SeedableRandomSampler(TensorDataset(torch.arange(10)), data_seed=7)
    sampler.set_epoch(3)
    list(sampler)
    torch.save(sampler, tmp_path / "sampler.bin")
    record = load_accelerate_sampler(tmp_path / "sampler.bin")
    assert record.epoch == 4 and record.initial_seed == 7
    assert torch.equal(record.generator.get_state(), sampler.generator.get_state())
    assert not isinstance(record.data_source, TensorDataset)  # an inert placeholder instead


def test_async_saves_copy_into_the_previous_copies_and_keep_tied_weights_tied(tmp_path):
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    model[1].weight = model[0].weight  # tied
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)

    accelerator.save_state(tmp_path / "first", async_save=True)
    accelerator.wait_for_checkpoint()
    first_copy = accelerator._background_saver.staging["weights"][0]["0.weight"]
    with torch.no_grad():
        model[0].weight.add_(1.0)
    expected = model[0].weight.detach().clone()
    accelerator.save_state(tmp_path / "second", async_save=True)
    with torch.no_grad():
        model[0].weight.add_(1.0)  # after the call: not in the checkpoint
    accelerator.wait_for_checkpoint()

    second_copy = accelerator._background_saver.staging["weights"][0]["0.weight"]
    assert second_copy.data_ptr() == first_copy.data_ptr()  # copied into the same memory
    saved = load_file(tmp_path / "second" / "model.safetensors")
    assert "1.weight" not in saved  # one tensor for the tied pair, as a synchronous save
    assert torch.equal(saved["0.weight"], expected)
    accelerator.end_training()
    assert accelerator._background_saver.staging is None
