"""A load that fails leaves the model (and the offload folder) as it was."""

import json

import pytest
import torch
from bigmodel_helpers import save_sharded
from load_helpers import assert_unchanged, empty_seq_model, seq_model, snapshot

from accel_bigmodel import load_checkpoint_in_model
from accel_bigmodel import loading as loading_module
from accel_bigmodel.safetensors_io import CheckpointError

DISK_MAP = {"0": "cpu", "1": "cpu", "2": "disk", "3": "disk"}


def _sharded(tmp_path, suffix):
    """A checkpoint of ``seq_model()`` in three shards: layer 0, layer 2, layer 3."""
    folder = tmp_path / "ckpt"
    shards = save_sharded(seq_model().state_dict(), folder, max_shard_bytes=300, suffix=suffix)
    assert len(shards) == 3
    return folder, shards


def _index(folder):
    return next(folder.glob("*.index.json"))


@pytest.mark.parametrize("suffix", ["safetensors", "bin"])
@pytest.mark.parametrize("strict", [False, True])
def test_index_key_missing_from_its_shard(tmp_path, suffix, strict):
    folder, shards = _sharded(tmp_path, suffix)
    index = json.loads(_index(folder).read_text())
    index["weight_map"]["3.weight"] = shards[0].name  # the first shard does not hold it
    _index(folder).write_text(json.dumps(index))
    model = seq_model(seed=1)
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, folder, strict=strict)
    message = str(info.value)
    assert f"maps 1 keys to shards that do not hold them: '3.weight' -> {shards[0].name}" in message
    assert f"(it is in {shards[2].name})" in message
    assert_unchanged(model, before)


def test_truncated_second_bin_shard_changes_nothing(tmp_path):
    folder, shards = _sharded(tmp_path, "bin")
    shards[1].write_bytes(shards[1].read_bytes()[:-40])
    model = seq_model(seed=1)
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, folder, DISK_MAP, offload_folder=tmp_path / "off")
    message = str(info.value)
    assert f"cannot load {shards[1]} with torch.load" in message
    assert "truncated or corrupt" in message
    assert_unchanged(model, before)
    assert not (tmp_path / "off").exists()


def test_bin_shard_failing_while_streaming_is_undone(tmp_path, monkeypatch):
    folder, shards = _sharded(tmp_path, "bin")
    real_load = loading_module.load_torch_file

    def failing_load(path):  # the check pass read it fine; streaming finds it unreadable
        if path == shards[2]:
            raise CheckpointError(f"cannot load {path} with torch.load (simulated)")
        return real_load(path)

    monkeypatch.setattr(loading_module, "load_torch_file", failing_load)
    model = seq_model(seed=1)
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, folder, DISK_MAP, offload_folder=tmp_path / "off")
    message = str(info.value)
    assert f"cannot load {shards[2]} with torch.load (simulated)" in message
    # layer 0 (2 tensors, CPU) and layer 2 (2 tensors, written to disk) were placed, then undone
    assert "Loading stopped after 4 tensors had been placed; they were put back" in message
    assert_unchanged(model, before)
    assert sorted(p.name for p in (tmp_path / "off").iterdir()) == []


def test_bin_shard_changed_after_the_check_is_an_error(tmp_path, monkeypatch):
    folder, shards = _sharded(tmp_path, "bin")
    real_load = loading_module.load_torch_file

    def changed_load(path):
        state = real_load(path)
        if path == shards[1]:
            state["2.weight"] = state["2.weight"].to(torch.int32)
        return state

    monkeypatch.setattr(loading_module, "load_torch_file", changed_load)
    model = empty_seq_model()
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, folder)
    message = str(info.value)
    assert f"{shards[1]} changed while the checkpoint was being loaded: ['2.weight']" in message
    assert "Loading stopped after 2 tensors had been placed; they were put back" in message
    assert_unchanged(model, before)
    assert model[0].weight.device.type == "meta"


def test_successful_sharded_bin_load_still_loads_every_tensor(tmp_path):
    folder, _ = _sharded(tmp_path, "bin")
    model = empty_seq_model()
    load_checkpoint_in_model(model, folder, strict=True)
    expected = seq_model().state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
