"""Enums, constants, environment helpers, availability checks, versions, formatting."""

import os

import pytest
import torch

import accel_ops
from accel_ops import (
    ComputeEnvironment,
    DistributedType,
    DynamoBackend,
    PrecisionType,
    RNGType,
    clear_environment,
    compare_versions,
    convert_bytes,
    convert_dict_to_env_variables,
    get_int_from_env,
    get_pretty_name,
    is_torch_version,
    merge_dicts,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    str_to_bool,
)


def test_enums_match_accelerate():
    assert DistributedType.MULTI_GPU == "MULTI_GPU" and DistributedType("NO") is DistributedType.NO
    assert {m.name for m in DistributedType} >= {"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED"}
    assert {"FSDP", "XLA", "MEGATRON_LM", "MULTI_NPU", "MULTI_XPU"} <= set(
        DistributedType.__members__
    )
    assert ComputeEnvironment.LOCAL_MACHINE.value == "LOCAL_MACHINE"
    assert PrecisionType.list() == ["no", "fp8", "fp16", "bf16"]
    assert "bf16" in PrecisionType and "fp32" not in PrecisionType
    assert str(PrecisionType.FP16) == "fp16"
    assert DynamoBackend("INDUCTOR") is DynamoBackend.INDUCTOR and "NO" in DynamoBackend
    assert RNGType.TORCH.value == "torch" and RNGType("generator") is RNGType.GENERATOR


def test_constants():
    assert accel_ops.SAFE_WEIGHTS_NAME == "model.safetensors"
    assert accel_ops.SAFE_WEIGHTS_INDEX_NAME == "model.safetensors.index.json"
    assert accel_ops.WEIGHTS_NAME == "pytorch_model.bin"
    assert accel_ops.WEIGHTS_INDEX_NAME == "pytorch_model.bin.index.json"
    assert (accel_ops.MODEL_NAME, accel_ops.OPTIMIZER_NAME) == ("pytorch_model", "optimizer")
    assert (accel_ops.SCHEDULER_NAME, accel_ops.SAMPLER_NAME) == ("scheduler", "sampler")
    assert (accel_ops.SCALER_NAME, accel_ops.RNG_STATE_NAME) == ("scaler.pt", "random_states")


def test_str_to_bool():
    assert str_to_bool("YES") == 1 and str_to_bool("off") == 0
    assert str_to_bool("t", to_bool=True) is True
    with pytest.raises(ValueError, match="invalid truth value 'maybe'"):
        str_to_bool("maybe")


def test_flags_choices_and_ints(monkeypatch):
    monkeypatch.setenv("A_FLAG", "true")
    monkeypatch.setenv("A_BAD", "sometimes")
    assert parse_flag_from_env("A_FLAG") is True
    assert parse_flag_from_env("UNSET_FLAG_X") is False
    assert parse_flag_from_env("UNSET_FLAG_X", True) is True
    with pytest.raises(ValueError, match="A_BAD='sometimes' is not valid; expected a boolean"):
        parse_flag_from_env("A_BAD")
    monkeypatch.setenv("A_CHOICE", "fp16")
    assert parse_choice_from_env("A_CHOICE") == "fp16"
    assert parse_choice_from_env("UNSET_CHOICE_X") == "no"
    monkeypatch.setenv("N1", "-1")
    monkeypatch.setenv("N2", "4")
    assert get_int_from_env(["UNSET_X", "N1", "N2"], 7) == 4
    assert get_int_from_env(["UNSET_X"], 7) == 7
    monkeypatch.setenv("N3", "x")
    with pytest.raises(ValueError, match="N3='x'"):
        get_int_from_env(["N3"], 0)


def test_patch_environment_restores(monkeypatch):
    monkeypatch.setenv("KEEP_ME", "old")
    monkeypatch.delenv("NEW_ONE", raising=False)
    with patch_environment(keep_me=1, new_one="x"):
        assert os.environ["KEEP_ME"] == "1" and os.environ["NEW_ONE"] == "x"
    assert os.environ["KEEP_ME"] == "old" and "NEW_ONE" not in os.environ


def test_clear_environment_restores(monkeypatch):
    monkeypatch.setenv("SOMETHING", "1")
    with clear_environment():
        assert dict(os.environ) == {}
        os.environ["INSIDE"] = "1"
    assert os.environ["SOMETHING"] == "1" and "INSIDE" not in os.environ


def test_convert_dict_to_env_variables():
    lines = convert_dict_to_env_variables({"A": "1", "B": "x;y", "C": "", "D": "two words"})
    assert lines == ["A=1\n"]


def test_formatting_helpers():
    assert convert_bytes(512) == "512 bytes"
    assert convert_bytes(1536) == "1.5 KB"
    assert convert_bytes(3 * 1024**3) == "3.0 GB"
    assert get_pretty_name(torch.nn.Linear) == "Linear"
    assert get_pretty_name(torch.nn.Linear(1, 1)) == "Linear"
    assert get_pretty_name(test_formatting_helpers) == "test_formatting_helpers"
    destination = {"a": {"x": 1}, "b": 2}
    assert merge_dicts({"a": {"y": 2}, "c": 3}, destination) is destination
    assert destination == {"a": {"x": 1, "y": 2}, "b": 2, "c": 3}


def test_versions():
    assert compare_versions("1.2.0", "<", "1.10")
    assert compare_versions("torch", ">=", "2.0")
    assert is_torch_version(">=", "2.0") and not is_torch_version("<", "1.0")
    with pytest.raises(ValueError, match="operation='=>' is not supported"):
        compare_versions("1.0", "=>", "1.0")


def test_availability_checks():
    assert accel_ops.is_cuda_available() == torch.cuda.is_available()
    assert accel_ops.is_fp16_available() is True
    assert accel_ops.is_bf16_available() in (True, False)
    assert accel_ops.is_transformers_available() in (True, False)
    assert accel_ops.is_timm_available() is False or accel_ops.is_timm_available() is True
    assert accel_ops.is_torch_xla_available() is False
    assert accel_ops.is_deepspeed_available() is False
    for name in ("npu", "xpu", "hpu", "mlu", "musa", "sdaa", "neuron"):
        assert getattr(accel_ops, f"is_{name}_available")() is False


def test_concatenate_returns_a_single_item_that_is_not_a_tensor_as_accelerate_does():
    assert accel_ops.concatenate([3]) == 3
    assert accel_ops.concatenate([{"a": ["x"]}]) == {"a": ["x"]}
    with pytest.raises(TypeError, match="Can only concatenate tensors, got a str"):
        accel_ops.concatenate(["a", "b"])
