"""Offloaded weights served from one memory map per safetensors file: views, not copies; pages
given back after each use; read-ahead hints; the prefetch setting.

An offloaded model asks for every weight on every forward (each generated token), so the weights
map must not open, map or parse a file per access, and the memory the pages occupy must go back
once the module has run (the process stays within its ``max_memory`` budget).
"""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from accel_bigmodel import offload as offload_module
from accel_bigmodel.offload import OffloadedWeightsLoader
from accel_bigmodel.prefetch import PREFETCH_VARIABLE, prefetch_mode
from accel_bigmodel.safetensors_io import CheckpointError, SafetensorsFile, _page_in_memory

MIB = 1 << 20


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def shard(tmp_path):
    tensors = {
        "small": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "big": torch.randn(4 * MIB),  # 16 MiB of float32
        "half": torch.arange(10, dtype=torch.bfloat16),
        "empty": torch.empty(0, 5),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return path, tensors


def test_tensors_are_views_of_one_map_with_the_files_values(shard):
    path, tensors = shard
    file = SafetensorsFile(path)
    mapped = {name: file.map(name) for name in tensors}
    for name, tensor in tensors.items():
        assert mapped[name].dtype == tensor.dtype and torch.equal(mapped[name], tensor), name
    # one map: the distance between two tensors' memory is their distance in the file
    entries = file.entries
    distance = mapped["big"].data_ptr() - mapped["small"].data_ptr()
    assert distance == entries["big"].start - entries["small"].start
    assert torch.equal(file.map("small"), load_file(str(path))["small"])


def test_writing_to_a_mapped_tensor_never_changes_the_file(shard):
    path, tensors = shard
    before = path.read_bytes()
    file = SafetensorsFile(path)
    file.map("big").fill_(7.0)
    assert path.read_bytes() == before
    assert torch.equal(SafetensorsFile(path).map("big"), tensors["big"])


def test_release_gives_the_pages_back_and_the_values_stay(shard):
    path, tensors = shard
    file = SafetensorsFile(path)
    big = file.map("big")
    before = _rss()
    assert float(big.sum()) == pytest.approx(float(tensors["big"].sum()), rel=1e-5)
    touched = _rss()
    assert touched - before > 12 * MIB  # the 16 MiB were mapped in
    file.release("big")
    assert touched - _rss() > 12 * MIB  # and given back
    assert torch.equal(big, tensors["big"])  # read again from the page cache on use


def test_read_ahead_hint_and_residency(shard):
    path, _ = shard
    file = SafetensorsFile(path)
    file.advise("big")  # the pages are in the page cache already (the file was just written)
    file.advise("empty")
    big = file.map("big")
    big.sum()
    page = file.entries["big"].start // os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PAGE_SIZE")
    assert file._base is not None  # advise found the map's address
    assert _page_in_memory(file._base + page)  # the page just read is in memory


def test_a_file_that_changed_size_is_a_checkpoint_error(shard):
    path, _ = shard
    file = SafetensorsFile(path)
    with open(path, "ab") as handle:
        handle.write(b"\0" * 16)
    with pytest.raises(CheckpointError, match="changed since its header was read"):
        file.map("small")


def test_the_weights_map_opens_each_file_once(shard, monkeypatch):
    path, tensors = shard
    opened = []
    real = offload_module.open_safetensors
    monkeypatch.setattr(offload_module, "open_safetensors", lambda p: opened.append(p) or real(p))
    index = {
        name: {"safetensors_file": str(path), "weight_name": name, "dtype": "float32"}
        for name in ("small", "big")
    }
    index["as_double"] = {"safetensors_file": str(path), "weight_name": "small", "dtype": "float64"}
    weights = OffloadedWeightsLoader(index=index)
    for _ in range(5):  # five "forwards"
        for name in index:
            weights[name]
            weights.advise(name)
            weights.release(name)
    assert opened == [str(path)]
    assert weights["as_double"].dtype == torch.float64
    assert torch.equal(weights["as_double"], tensors["small"].double())


@pytest.mark.parametrize(
    ("value", "mode"),
    [("", None), ("thread", "thread"), ("1", "thread"), ("advise", "advise"), ("0", None)],
)
def test_the_prefetch_setting(monkeypatch, value, mode):
    monkeypatch.setenv(PREFETCH_VARIABLE, value)
    assert prefetch_mode(None) == mode
    assert prefetch_mode(True) == "thread" and prefetch_mode(False) is None


def test_a_bad_prefetch_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv(PREFETCH_VARIABLE, "sometimes")
    with pytest.raises(ValueError, match=r"ACCEL_OFFLOAD_PREFETCH='sometimes' is not one of"):
        prefetch_mode(None)


def test_offload_slots_fill_and_empty_without_copies():
    from torch import nn

    from accel_bigmodel.offload_slots import OffloadSlots

    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    names = ["0.weight", "0.bias", "1.running_mean"]
    slots = OffloadSlots(model, names)
    placeholders = {name: slots.slots[name].placeholder for name in names}
    assert all(p.device.type == "meta" for p in placeholders.values())
    values = {name: weights[name] for name in names}
    values["0.bias"] = values["0.bias"].double()  # another dtype: cast through the slow path
    slots.fill(values, "cpu")
    assert model[0].weight.data_ptr() == weights["0.weight"].data_ptr()  # no copy
    assert model[1].running_mean is weights["1.running_mean"]
    assert model[0].bias.dtype == torch.float32 and torch.equal(model[0].bias, weights["0.bias"])
    assert isinstance(model[0].weight, nn.Parameter) and model[0].weight.requires_grad
    slots.empty()
    assert model[0].weight is placeholders["0.weight"]
    assert model[1].running_mean is placeholders["1.running_mean"]
    with pytest.raises(ValueError, match="Trying to set a tensor of shape"):
        slots.fill({"0.weight": torch.zeros(5)}, "cpu")


class _FakeHook:
    def __init__(self, size: int) -> None:
        self.size, self.advised = size, 0

    def offloaded_bytes(self) -> int:
        return self.size

    def advise_weights(self) -> None:
        self.advised += 1


def test_read_ahead_asks_for_each_module_once_per_pass_within_the_window():
    from accel_bigmodel.read_ahead import ReadAhead

    hooks = [_FakeHook(10) for _ in range(6)]
    ahead = ReadAhead(hooks, window_bytes=25)
    ahead.after(hooks[0])
    assert [h.advised for h in hooks] == [0, 1, 1, 1, 0, 0]  # 30 bytes >= 25 after module 0
    for hook in hooks[1:]:
        ahead.after(hook)
    # one pass: modules 1-5 asked for once, and the next pass's 0, 1, 2 already (window)
    assert [h.advised for h in hooks] == [1, 2, 2, 1, 1, 1]
    for _ in range(3):  # three more passes (tokens): once per module per pass
        for hook in hooks:
            ahead.after(hook)
    assert [h.advised for h in hooks] == [4, 5, 5, 4, 4, 4]
    assert ahead.take(hooks[0]) is None


def test_read_ahead_never_asks_beyond_one_pass():
    from accel_bigmodel.read_ahead import ReadAhead

    hooks = [_FakeHook(1) for _ in range(3)]
    ReadAhead(hooks, window_bytes=1000).after(hooks[0])
    assert [h.advised for h in hooks] == [0, 1, 1]  # not the running module itself
