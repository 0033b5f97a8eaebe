import pytest
import torch
from torch import nn

from accel_bigmodel import (
    CustomDtype,
    calculate_maximum_sizes,
    compute_module_sizes,
    convert_file_size_to_int,
    dtype_byte_size,
    get_balanced_memory,
    get_max_layer_size,
    get_max_memory,
    id_tensor_storage,
    init_empty_weights,
    named_module_tensors,
)


def test_dtype_byte_size():
    assert dtype_byte_size(torch.float32) == 4
    assert dtype_byte_size(torch.bfloat16) == 2
    assert dtype_byte_size(torch.int8) == 1
    assert dtype_byte_size(torch.bool) == 1 / 8
    assert dtype_byte_size(CustomDtype.INT4) == 0.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10GiB", 10 * 2**30),
        ("500MB", 500 * 10**6),
        ("1.5GB", 1_500_000_000),
        ("64KiB", 65536),
        ("5Gb", 625_000_000),
        ("123", 123),
        (42, 42),
    ],
)
def test_convert_file_size_to_int(text, expected):
    assert convert_file_size_to_int(text) == expected


def test_convert_file_size_rejects_garbage():
    with pytest.raises(ValueError, match=r"'lots'.*'10GiB'"):
        convert_file_size_to_int("lots")


def _two_linears() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))


def test_compute_module_sizes_hand_computed():
    with init_empty_weights():
        model = _two_linears()
    sizes = compute_module_sizes(model)
    assert sizes["0.weight"] == 64 and sizes["0.bias"] == 16 and sizes["0"] == 80
    assert sizes["1"] == (8 + 2) * 4
    assert sizes[""] == 120
    half = compute_module_sizes(model, dtype=torch.float16)
    assert half[""] == 60
    special = compute_module_sizes(model, special_dtypes={"0.weight": torch.int8})
    assert special["0"] == 16 + 16


def test_layer_sizes():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 8), nn.ReLU()))
    sizes = compute_module_sizes(model)
    assert get_max_layer_size(list(model.named_children()), sizes, None) == (160, ["1.0"])
    assert get_max_layer_size(list(model.named_children()), sizes, ["Sequential"]) == (160, ["1"])
    total, (largest, names) = calculate_maximum_sizes(model)
    assert total == 80 + 160 and largest == 160 and names == ["1.0"]


def test_get_max_memory():
    memory = get_max_memory({"cpu": "1GiB", 1: "2GB", "cuda:0": 100, "disk": "1TB"})
    assert list(memory) == [0, 1, "cpu", "disk"]
    assert memory == {0: 100, 1: 2 * 10**9, "cpu": 2**30, "disk": 10**12}
    assert get_max_memory()["cpu"] > 0


def test_get_max_memory_converts_the_callers_sizes_as_accelerate_does():
    # transformers compares the dict it passed with the result, so its strings must become ints
    given = {"cpu": "300KB", "cuda:0": 100, "disk": "1GB"}
    get_max_memory(given)
    assert given == {"cpu": 300_000, "cuda:0": 100, "disk": 10**9}
    unchanged = {"cpu": "1GiB", "gpu": "1GB"}
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        get_max_memory(unchanged)
    assert unchanged == {"cpu": "1GiB", "gpu": "1GB"}  # checked before anything is converted


def test_get_max_memory_unknown_device():
    with pytest.raises(ValueError, match=r"unknown device 'gpu'.*'cuda:N', 'cpu', 'mps' or 'disk'"):
        get_max_memory({"gpu": "1GiB"})


def test_balanced_memory_over_gpu_indices():
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)])  # 4 x 80 bytes
    # Accelerate 1.15's values: 320 // 2 GPUs + 1.25 * 80 (the mean innermost module) = 260
    memory = get_balanced_memory(model, {0: 1000, 1: 1000, "cpu": 1000})
    assert memory == {0: 260, 1: 1000, "cpu": 1000}
    low = get_balanced_memory(model, {0: 1000, 1: 1000, 2: 1000, "cpu": 1000}, low_zero=True)
    assert low == {0: 0, 1: 260, 2: 1000, "cpu": 1000}
    assert get_balanced_memory(model, {0: 1000, "cpu": 5}) == {0: 1000, "cpu": 5}
    # GPUs 1 and 2 hold 1100 bytes, more than the model: GPU 0 gets nothing
    tight = get_balanced_memory(model, {0: 100, 1: 100, 2: 1000, "cpu": 1000}, low_zero=True)
    assert tight == {0: 0, 1: 100, 2: 1000, "cpu": 1000}


def test_named_module_tensors_and_storage_ids():
    module = nn.BatchNorm1d(3)
    module.register_buffer("scratch", torch.zeros(2), persistent=False)
    names = [n for n, _ in named_module_tensors(module)]
    assert "scratch" in names and "weight" in names
    kept = [n for n, _ in named_module_tensors(module, remove_non_persistent=True)]
    assert "scratch" not in kept and "running_mean" in kept
    base = torch.zeros(10)
    assert id_tensor_storage(base[:5]) == id_tensor_storage(base[5:])
    assert id_tensor_storage(base) != id_tensor_storage(torch.zeros(10))
