"""Checkpoint dtypes: floating values are cast to the model's dtype; a change of kind raises."""

import pytest
import torch
from load_helpers import WithBuffers, assert_unchanged, empty_seq_model, seq_model, snapshot
from safetensors.torch import save_file

from accel_bigmodel import init_empty_weights, load_checkpoint_in_model
from accel_bigmodel.safetensors_io import CheckpointError


def test_float_values_are_cast_to_the_parameter_dtype(tmp_path):
    state = seq_model().state_dict()
    save_file(state, str(tmp_path / "fp32.safetensors"))
    half = {k: v.half() for k, v in state.items()}
    save_file(half, str(tmp_path / "fp16.safetensors"))

    bf16_model = seq_model(seed=1).to(torch.bfloat16)
    load_checkpoint_in_model(bf16_model, tmp_path / "fp32.safetensors")
    assert bf16_model[0].weight.dtype == torch.bfloat16
    assert torch.equal(bf16_model[0].weight.detach(), state["0.weight"].to(torch.bfloat16))

    fp32_model = empty_seq_model()
    load_checkpoint_in_model(fp32_model, tmp_path / "fp16.safetensors")
    assert fp32_model[3].bias.dtype == torch.float32
    assert torch.equal(fp32_model[3].bias.detach(), half["3.bias"].float())


def test_dtype_argument_still_casts_floating_weights(tmp_path):
    save_file(seq_model().state_dict(), str(tmp_path / "model.safetensors"))
    model = empty_seq_model()
    load_checkpoint_in_model(model, tmp_path, dtype="float16")
    assert {p.dtype for p in model.parameters()} == {torch.float16}
    with pytest.raises(ValueError, match=r"dtype=torch.int8 is not a floating-point dtype"):
        load_checkpoint_in_model(empty_seq_model(), tmp_path, dtype=torch.int8)


@pytest.mark.parametrize("suffix", ["safetensors", "bin"])
def test_integer_values_for_a_float_parameter_are_an_error(tmp_path, suffix):
    state = seq_model().state_dict()
    state["2.weight"] = torch.ones(8, 8, dtype=torch.int64)
    path = tmp_path / f"model.{suffix}"
    if suffix == "safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    model = seq_model(seed=1)
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, path, dtype=torch.float16)
    message = str(info.value)
    assert "2.weight: checkpoint int64, model float32" in message
    assert "cannot be cast to the model's without losing values" in message
    assert_unchanged(model, before)


def test_float_values_for_integer_and_bool_buffers_are_an_error(tmp_path):
    state = WithBuffers().state_dict()
    state["counts"] = state["counts"].float()
    state["mask"] = state["mask"].half()
    save_file(state, str(tmp_path / "model.safetensors"))
    model = WithBuffers()
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, tmp_path)
    message = str(info.value)
    assert "counts: checkpoint float32, model int64" in message
    assert "mask: checkpoint float16, model bool" in message
    assert_unchanged(model, before)


def test_integer_buffers_of_the_same_kind_load(tmp_path):
    state = WithBuffers().state_dict()
    state["counts"] = torch.tensor([7, 8, 9, 10], dtype=torch.int64)
    save_file(state, str(tmp_path / "model.safetensors"))
    with init_empty_weights(include_buffers=True):
        model = WithBuffers()
    load_checkpoint_in_model(model, tmp_path, dtype=torch.bfloat16)
    assert model.counts.tolist() == [7, 8, 9, 10]
    assert model.counts.dtype == torch.int64
    assert model.mask.dtype == torch.bool
    assert model.linear.weight.dtype == torch.bfloat16
