import json

import pytest
import torch
from safetensors.torch import save_file

from accel_bigmodel import (
    DiskOffloadStorage,
    OffloadedWeightsLoader,
    PrefixedDataset,
    extract_submodules_state_dict,
    load_offloaded_weight,
    offload_state_dict,
    offload_weight,
    save_offload_index,
)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 4),
        torch.randn(5).to(torch.bfloat16),
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
        torch.tensor([True, False, True]),
        torch.tensor(3.5),
    ],
    ids=["float32", "bfloat16", "int64", "bool", "scalar"],
)
def test_offload_weight_round_trip_in_accelerate_format(tmp_path, tensor):
    index = offload_weight(tensor, "layer.weight", tmp_path)
    info = index["layer.weight"]
    assert info == {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape)}
    raw = (tmp_path / "layer.weight.dat").read_bytes()
    assert raw == tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
    back = load_offloaded_weight(tmp_path / "layer.weight.dat", info)
    assert back.dtype == tensor.dtype and torch.equal(back, tensor)


def test_index_merges_and_loader_reads(tmp_path):
    state = {"a.weight": torch.randn(2, 2), "b.bias": torch.randn(3)}
    offload_state_dict(tmp_path, state)
    save_offload_index({"c": {"dtype": "float32", "shape": [1]}}, tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    assert sorted(index) == ["a.weight", "b.bias", "c"]
    loader = OffloadedWeightsLoader(state_dict={"m": torch.ones(1)}, save_folder=tmp_path)
    assert list(loader)[:1] == ["m"] and len(loader) == 4
    assert torch.equal(loader["a.weight"], state["a.weight"])
    view = PrefixedDataset(loader, "a.")
    assert torch.equal(view["weight"], state["a.weight"])
    assert list(view) == ["a.weight"]


def test_safetensors_reference_writes_nothing(tmp_path):
    weights = {"w": torch.randn(4, 4), "v": torch.randn(2).to(torch.bfloat16)}
    save_file(weights, str(tmp_path / "model.safetensors"))
    storage = DiskOffloadStorage(tmp_path / "offload")
    storage.add_reference("layer.w", tmp_path / "model.safetensors", "w", torch.float32, [4, 4])
    storage.add_reference("layer.v", tmp_path / "model.safetensors", "v", torch.float32, [2])
    storage.alias("head.w", "layer.w")
    storage.flush()
    assert storage.bytes_written == 0
    assert sorted(p.name for p in (tmp_path / "offload").iterdir()) == ["index.json"]
    loader = OffloadedWeightsLoader(save_folder=tmp_path / "offload")
    assert torch.equal(loader["layer.w"], weights["w"])
    assert torch.equal(loader["head.w"], weights["w"])
    assert loader["layer.v"].dtype == torch.float32
    assert torch.equal(loader["layer.v"], weights["v"].float())


def test_disk_storage_write_read_and_discard(tmp_path):
    storage = DiskOffloadStorage(tmp_path)
    tensor = torch.randn(3)
    storage.write("x", tensor)
    assert "x" in storage and torch.equal(storage.read("x"), tensor)
    assert storage.bytes_written == 12
    storage.discard_writes()
    assert not (tmp_path / "x.dat").exists()


def test_unwritable_offload_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"cannot write to the offload folder .*a-file/sub"):
        DiskOffloadStorage(blocker / "sub")


def test_damaged_dat_file_is_reported(tmp_path):
    index = offload_weight(torch.randn(8), "w", tmp_path)
    (tmp_path / "w.dat").write_bytes(b"1234")
    with pytest.raises(ValueError, match=r"w.dat has 4 bytes, expected 32"):
        load_offloaded_weight(tmp_path / "w.dat", index["w"])


def test_extract_submodules_state_dict():
    state = {"a.x": 1, "ab.y": 2, "a.b.z": 3, "c": 4}
    assert extract_submodules_state_dict(state, ["a"]) == {"a.x": 1, "a.b.z": 3}
    assert extract_submodules_state_dict(state, ["c", "ab"]) == {"c": 4, "ab.y": 2}
