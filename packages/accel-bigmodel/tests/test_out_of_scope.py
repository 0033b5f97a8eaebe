"""bitsandbytes and pipeline inference: the names resolve, the objects build, using them raises."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import accel_bigmodel
from accel_bigmodel import (
    BnbQuantizationConfig,
    CustomDtype,
    OutOfScopeError,
    get_keys_to_not_convert,
    get_parameter_device,
    has_4bit_bnb_layers,
)


def test_bnb_config_has_accelerates_fields_and_defaults():
    # dataclasses.fields of Accelerate 1.15's BnbQuantizationConfig
    assert [(f.name, f.default) for f in dataclasses.fields(BnbQuantizationConfig)] == [
        ("load_in_8bit", False),
        ("llm_int8_threshold", 6.0),
        ("load_in_4bit", False),
        ("bnb_4bit_quant_type", "fp4"),
        ("bnb_4bit_use_double_quant", False),
        ("bnb_4bit_compute_dtype", "fp16"),
        ("torch_dtype", None),
        ("skip_modules", None),
        ("keep_in_fp32_modules", None),
    ]
    four = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="bf16")
    assert (four.torch_dtype, four.target_dtype) == (torch.bfloat16, CustomDtype.INT4)
    assert four.bnb_4bit_compute_dtype == torch.bfloat16
    eight = BnbQuantizationConfig(load_in_8bit=True)
    assert (eight.torch_dtype, eight.target_dtype) == (torch.float16, torch.int8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of load_in_8bit and load_in_4bit"),
        ({"load_in_8bit": True, "load_in_4bit": True}, "exactly one"),
        ({"load_in_4bit": True, "bnb_4bit_quant_type": "int"}, "'fp4' or 'nf4', got 'int'"),
        ({"load_in_8bit": True, "torch_dtype": "fp64"}, "torch_dtype must be.*'fp64'"),
        ({"load_in_8bit": 1}, "load_in_8bit must be a bool"),
        ({"load_in_8bit": True, "skip_modules": "lm_head"}, "skip_modules must be a list"),
    ],
)
def test_bnb_config_rejects_what_accelerate_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):  # Accelerate raises ValueError for each
        BnbQuantizationConfig(**kwargs)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("load_and_quantize_model", (nn.Linear(2, 2), None)),
        ("get_quantized_model_device_map", (nn.Linear(2, 2), None)),
        ("replace_with_bnb_layers", (nn.Linear(2, 2), None)),
        ("quantize_and_offload_8bit", (None, None, "w", torch.int8, "folder", {}, None)),
    ],
)
def test_quantizing_raises_out_of_scope(name, args):
    with pytest.raises(
        OutOfScopeError,
        match=rf"{name} \(bitsandbytes quantization\) is out of "
        r"scope.*dtype=torch.bfloat16.*BitsAndBytesConfig",
    ):
        getattr(accel_bigmodel, name)(*args)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("prepare_pippy", (nn.Linear(2, 2),)),
        ("generate_device_map", (nn.Linear(2, 2),)),
        ("build_pipeline", (nn.Linear(2, 2), [], (), {}, 2)),
        ("find_pippy_batch_size", ((torch.zeros(2),), None)),
        ("pippy_forward", (print, 2, False)),
    ],
)
def test_pipeline_inference_raises_out_of_scope(name, args):
    with pytest.raises(
        OutOfScopeError,
        match=rf"{name}: pipeline-parallel inference.*"
        r"dispatch_model.*device_map=\"auto\"",
    ):
        getattr(accel_bigmodel, name)(*args)
    assert issubclass(OutOfScopeError, NotImplementedError)


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.h = nn.Linear(4, 4)


class LM(nn.Module):
    base_model_prefix = "transformer"

    def __init__(self, tie: bool = True):
        super().__init__()
        self.transformer = Base()
        self.lm_head = nn.Linear(4, 10, bias=False)
        if tie:
            self.lm_head.weight = self.transformer.wte.weight


class BaseOnly(Base):
    base_model_prefix = "transformer"


def test_model_inspection_helpers_answer_truthfully():
    # Accelerate 1.15 gives the same names (it lists lm_head twice, in a set's order)
    assert get_keys_to_not_convert(LM()) == ["lm_head", "transformer.wte"]
    assert get_keys_to_not_convert(LM(tie=False)) == ["lm_head"]
    assert get_keys_to_not_convert(BaseOnly()) == []
    assert get_keys_to_not_convert(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 3))) == ["1"]
    assert get_parameter_device(nn.Linear(2, 2)) == torch.device("cpu")
    with torch.device("meta"):
        assert get_parameter_device(nn.Linear(2, 2)) == torch.device("meta")
    assert has_4bit_bnb_layers(LM()) is False  # no bitsandbytes here: no 4-bit layer exists
