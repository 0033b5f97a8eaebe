"""Bad input is a clear error and leaves nothing half-written."""

import json

import pytest
import torch
from bigmodel_helpers import save_sharded
from safetensors.torch import save_file
from torch import nn

from accel_bigmodel import (
    init_empty_weights,
    load_checkpoint_and_dispatch,
    load_checkpoint_in_model,
    load_state_dict,
)
from accel_bigmodel.safetensors_io import CheckpointError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 4))


def _empty() -> nn.Module:
    with init_empty_weights():
        return _model()


DISK_MAP = {"0": "cpu", "1": "cpu", "2": "disk", "3": "disk"}


@pytest.fixture
def sharded(tmp_path):
    folder = tmp_path / "ckpt"
    save_sharded(_model().state_dict(), folder, max_shard_bytes=300)
    return folder


def _assert_nothing_written(folder):
    assert not folder.exists() or sorted(p.name for p in folder.iterdir()) == []


def test_truncated_shard_names_the_file(sharded, tmp_path):
    shards = sorted(sharded.glob("*.safetensors"))
    last = shards[-1]
    last.write_bytes(last.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=rf"{last.name} is not a readable safetensors file.*"):
        load_checkpoint_in_model(_empty(), sharded, DISK_MAP, offload_folder=tmp_path / "off")
    _assert_nothing_written(tmp_path / "off")


def test_corrupt_header_names_the_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes((20).to_bytes(8, "little") + b"{not json at all!!!}")
    with pytest.raises(CheckpointError, match=r"model.safetensors .*header is not valid JSON"):
        load_checkpoint_in_model(_empty(), path)
    path.write_bytes(b"abc")
    with pytest.raises(CheckpointError, match=r"has 3 bytes"):
        load_state_dict(path)


def test_missing_shard_names_key_and_file(sharded, tmp_path):
    shards = sorted(sharded.glob("*.safetensors"))
    shards[1].unlink()
    with pytest.raises(CheckpointError, match=rf"missing from .*{shards[1].name} \(needed for"):
        load_checkpoint_and_dispatch(
            _empty(), sharded, device_map=DISK_MAP, offload_folder=tmp_path / "off"
        )
    _assert_nothing_written(tmp_path / "off")


def test_mismatched_checkpoint_lists_names_with_closest_match(tmp_path):
    state = _model().state_dict()
    state["3.wieght"] = state.pop("3.weight")
    state["extra.bias"] = torch.zeros(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(_empty(), tmp_path, DISK_MAP, offload_folder=tmp_path / "off")
    message = str(info.value)
    assert "3.weight  (closest in checkpoint: 3.wieght)" in message
    assert "3.wieght  (closest in model: 3.weight)" in message
    assert "extra.bias" in message
    _assert_nothing_written(tmp_path / "off")


def test_strict_rejects_unexpected_names_only_when_asked(tmp_path):
    state = {**_model().state_dict(), "unused": torch.zeros(1)}
    save_file(state, str(tmp_path / "model.safetensors"))
    model = _empty()
    load_checkpoint_in_model(model, tmp_path)  # not strict: the extra name is skipped
    assert model[0].weight.device.type == "cpu"
    with pytest.raises(CheckpointError, match=r"1 names in the checkpoint are not in the model"):
        load_checkpoint_in_model(_empty(), tmp_path, strict=True)


def test_wrong_shapes_are_listed(tmp_path):
    state = _model().state_dict()
    state["0.weight"] = torch.zeros(8, 9)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"0.weight: checkpoint \[8, 9\], model \[8, 8\]"):
        load_checkpoint_in_model(_empty(), tmp_path)


def test_unknown_device_and_strategy(sharded):
    with pytest.raises(ValueError, match=r"unknown device 'tpu' for module '0'"):
        load_checkpoint_and_dispatch(_empty(), sharded, device_map={"0": "tpu", "1": 0, "2": 0})
    with pytest.raises(ValueError, match=r"unknown device_map strategy 'fastest'"):
        load_checkpoint_and_dispatch(_empty(), sharded, device_map="fastest")


def test_budget_too_small(sharded, tmp_path):
    # As in Accelerate 1.15: a CPU budget smaller than the biggest layer (288 bytes) leaves the
    # CPU empty and sends the whole model to disk, which needs an offload folder
    budget = {"cpu": 100}
    with pytest.raises(ValueError, match=r"sends modules to 'disk': pass offload_folder"):
        load_checkpoint_and_dispatch(_empty(), sharded, device_map="auto", max_memory=budget)
    model = load_checkpoint_and_dispatch(
        _empty(), sharded, device_map="auto", max_memory=budget, offload_folder=tmp_path / "off"
    )
    assert model.hf_device_map == {"": "disk"}
    x = torch.randn(2, 8)
    assert torch.equal(model(x), _model()(x))


def test_unwritable_offload_folder(sharded, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"cannot write to the offload folder"):
        load_checkpoint_and_dispatch(
            _empty(), sharded, device_map=DISK_MAP, offload_folder=blocker / "off"
        )
    with pytest.raises(ValueError, match=r"pass offload_folder"):
        load_checkpoint_and_dispatch(_empty(), sharded, device_map=DISK_MAP)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"does not exist"):
        load_checkpoint_in_model(_empty(), tmp_path / "nothing")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CheckpointError, match=r"no checkpoint found in"):
        load_checkpoint_in_model(_empty(), tmp_path)
    (tmp_path / "bad.index.json").write_text(json.dumps({"weights": {}}))
    with pytest.raises(CheckpointError, match=r"'weight_map'"):
        load_checkpoint_in_model(_empty(), tmp_path)
