"""Layerwise casting: storage dtype between forwards, compute dtype during them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accel_bigmodel import (
    LayerwiseCastingHook,
    ModelHook,
    add_hook_to_module,
    attach_layerwise_casting_hooks,
    remove_hook_from_module,
)

STORAGE, COMPUTE = torch.float8_e4m3fn, torch.bfloat16


class RecordingLinear(nn.Linear):
    """A Linear that records the dtype of its weight while its forward runs."""

    seen: list[torch.dtype]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(self.weight.dtype)
        return super().forward(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.block = nn.Sequential(RecordingLinear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8))
        self.conv = nn.Conv1d(8, 8, 1)
        self.norm_out = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)
        self.block[0].seen = []


def _hooked(model: nn.Module) -> list[str]:
    return [
        n for n, m in model.named_modules() if isinstance(getattr(m, "_hf_hook", None), ModelHook)
    ]


@pytest.mark.parametrize(
    ("options", "hooked"),
    [
        # the modules Accelerate 1.15 attaches hooks to, for the same options
        ({}, ["block.0", "block.2", "conv", "norm_out", "head"]),
        ({"skip_modules_pattern": ("head", r"block\.2")}, ["block.0", "conv", "norm_out"]),
        ({"skip_modules_classes": (nn.Conv1d,)}, ["block.0", "block.2", "norm_out", "head"]),
        # one string is one pattern (Accelerate reads it letter by letter and skips all but head)
        ({"skip_modules_pattern": "norm"}, ["block.0", "block.2", "conv", "head"]),
        ({"skip_modules_pattern": ["^block"]}, ["conv", "norm_out", "head"]),
    ],
)
def test_which_layers_get_hooks(options, hooked):
    torch.manual_seed(0)
    model = Net()
    attach_layerwise_casting_hooks(model, STORAGE, COMPUTE, **options)
    assert _hooked(model) == hooked
    for name, module in model.named_modules():
        if name in hooked:
            assert module.weight.dtype == STORAGE and module.bias.dtype == STORAGE
        elif isinstance(module, (nn.Embedding, nn.LayerNorm, nn.Linear, nn.Conv1d)):
            assert module.weight.dtype == torch.float32, name


def test_forward_computes_in_the_compute_dtype_then_stores_again():
    torch.manual_seed(0)
    model = Net()
    attach_layerwise_casting_hooks(model, STORAGE, COMPUTE)
    layer = model.block[0]
    assert isinstance(layer._hf_hook, LayerwiseCastingHook)
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()  # float8 values
    x = torch.randn(3, 8, dtype=COMPUTE)
    out = layer(x)
    assert layer.seen == [COMPUTE]
    assert layer.weight.dtype == STORAGE  # back to storage after the forward
    assert out.dtype == COMPUTE
    expected = F.linear(x, weight.to(COMPUTE), bias.to(COMPUTE))
    assert torch.equal(out, expected)
    # the storage round trip loses no more: the stored values did not change
    assert torch.equal(layer.weight.float(), weight.float())


def test_an_existing_hook_is_kept_and_runs_first():
    calls = []

    class Note(ModelHook):
        def pre_forward(self, module, *args, **kwargs):
            calls.append(module.weight.dtype)
            return args, kwargs

    layer = nn.Linear(4, 4)
    add_hook_to_module(layer, Note())
    attach_layerwise_casting_hooks(layer, torch.float16, torch.float32)
    assert layer.weight.dtype == torch.float16
    layer(torch.randn(2, 4))
    assert calls == [torch.float16]  # the first hook ran before the cast to float32
    assert layer.weight.dtype == torch.float16
    remove_hook_from_module(layer)
    assert not hasattr(layer, "_hf_hook")


def test_non_float_tensors_are_left_alone():
    layer = nn.Linear(4, 4)
    layer.register_buffer("ids", torch.arange(4))
    attach_layerwise_casting_hooks(layer, torch.bfloat16, torch.float32)
    assert layer.weight.dtype == torch.bfloat16 and layer.ids.dtype == torch.int64
