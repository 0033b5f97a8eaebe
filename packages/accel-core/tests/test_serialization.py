"""save/load: atomic writes, safetensors with shared tensors, main process only; unwrapping."""

from __future__ import annotations

import os

import pytest
import torch

from accel_core import (
    clean_state_dict_for_safetensors,
    extract_model_from_parallel,
    is_compiled_module,
    load,
    save,
)


def test_torch_save_round_trip_and_atomic_replace(tmp_path):
    target = tmp_path / "obj.pt"
    target.write_bytes(b"old contents")
    save({"w": torch.arange(3.0), "step": 7}, target)
    loaded = load(target)
    assert torch.equal(loaded["w"], torch.arange(3.0)) and loaded["step"] == 7
    assert sorted(os.listdir(tmp_path)) == ["obj.pt"]  # no temporary file left behind
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "obj.safetensors"
    target.write_bytes(b"old contents")
    with pytest.raises(TypeError, match="dict of tensors"):
        save([1, 2], target, safe_serialization=True)
    assert target.read_bytes() == b"old contents"
    assert sorted(os.listdir(tmp_path)) == ["obj.safetensors"]


def test_safetensors_drop_shared_tensors_and_make_them_contiguous(tmp_path):
    weight = torch.arange(6.0).reshape(2, 3)
    state = {"embed": weight, "head": weight, "view": weight.t()}
    cleaned = clean_state_dict_for_safetensors(state)
    assert list(cleaned) == ["embed"]
    other = {"a": torch.ones(2, 3).t(), "b": torch.zeros(2)}
    cleaned = clean_state_dict_for_safetensors(other)
    assert cleaned["a"].is_contiguous() and set(cleaned) == {"a", "b"}
    save(state, tmp_path / "m.safetensors", safe_serialization=True)
    loaded = load(tmp_path / "m.safetensors")
    assert list(loaded) == ["embed"] and torch.equal(loaded["embed"], weight)


def test_extract_model_from_compiled_module():
    model = torch.nn.Linear(2, 2)
    compiled = torch.compile(model, backend="eager")
    assert is_compiled_module(compiled) and not is_compiled_module(model)
    assert extract_model_from_parallel(compiled) is compiled
    assert extract_model_from_parallel(compiled, keep_torch_compile=False) is model
