"""The fsdp_utils helpers that need no strategy (the others: test_fsdp_strategy_calls.py)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

from accel_backends import (
    FullyShardedDataParallelPlugin,
    StrategyNotBuiltError,
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    ensure_weights_retied,
    fsdp2_apply_ac,
    fsdp2_canonicalize_names,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_switch_optimizer_parameters,
    get_fsdp2_grad_scaler,
    get_parameters_from_modules,
)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Net(torch.nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class Tied(torch.nn.Module):
    _tied_weights_keys = ["decoder.weight"]

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Embedding(5, 3)
        self.decoder = torch.nn.Linear(3, 5, bias=False)
        self.decoder.weight = self.encoder.weight


def test_ram_efficient_loading_toggles(monkeypatch: pytest.MonkeyPatch):
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCELERATE_USE_FSDP"] == "True"
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"
    disable_fsdp_ram_efficient_loading()
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "False"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCELERATE_USE_FSDP"] == "false"  # a value already set is kept


def test_ensure_weights_retied_ties_the_reallocated_parameters():
    with torch.device("meta"):
        model = Tied()

    def materialise(module: torch.nn.Module) -> torch.nn.Module:
        return module.to_empty(device="cpu", recurse=False)

    init = ensure_weights_retied(materialise, model, torch.device("cpu"))
    assert init is not materialise
    for module in (model.encoder, model.decoder):
        init(module)
    assert model.encoder.weight.device.type == "cpu"
    assert model.decoder.weight is model.encoder.weight
    untied = Net()
    assert ensure_weights_retied(materialise, untied, torch.device("cpu")) is materialise


def test_canonicalize_names_removes_wrapper_parts():
    names = {
        "_orig_mod.blocks.0._checkpoint_wrapped_module.linear.weight": 1,
        "head._orig_mod.bias": 2,
        "plain": 3,
    }
    assert fsdp2_canonicalize_names(names) == {
        "blocks.0.linear.weight": 1,
        "head.bias": 2,
        "plain": 3,
    }


def test_switch_optimizer_parameters_by_address():
    old = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(3))]
    new = [torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.SGD(old, lr=0.1)
    mapping = {p.data_ptr(): q for p, q in zip(old, new, strict=True)}
    fsdp2_switch_optimizer_parameters(optimizer, mapping)
    assert optimizer.param_groups[0]["params"] == new
    with pytest.raises(KeyError, match="couldn't be switched"):
        fsdp2_switch_optimizer_parameters(optimizer, {})


def test_parameters_from_modules_by_regex_or_list():
    model = Net()
    by_name = get_parameters_from_modules(r"blocks\.\d", model, "cpu")
    expected = {p for block in model.blocks for p in block.parameters()}
    assert by_name == expected
    assert get_parameters_from_modules([model.head], model, None) == set(model.head.parameters())
    assert get_parameters_from_modules(None, model, None) == set()


def test_fsdp2_auto_wrap_policy():
    model = Net()
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap"
    )
    wraps = fsdp2_prepare_auto_wrap_policy(plugin, model)
    assert [wraps(m) for m in (model.blocks[0], model.blocks, model.head)] == [True, False, False]
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="size_based_wrap", min_num_params=20
    )
    large = fsdp2_prepare_auto_wrap_policy(plugin, model)
    # Block: 4*4+4 = 20 parameters (not above 20); head: 10; the Sequential of two: 40
    assert [large(m) for m in (model.blocks[0], model.head, model.blocks)] == [False, False, True]
    assert (
        fsdp2_prepare_auto_wrap_policy(FullyShardedDataParallelPlugin(fsdp_version=2), model)
        is None
    )


def test_fsdp2_apply_ac_checkpoints_the_layers():
    model = Net()
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap", activation_checkpointing=True
    )
    x = torch.randn(3, 4)
    expected = model(x)
    accelerator = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin))
    assert fsdp2_apply_ac(accelerator, model) is model
    assert all(isinstance(block, CheckpointWrapper) for block in model.blocks)
    assert not isinstance(model.head, CheckpointWrapper)
    out = model(x)
    out.sum().backward()
    torch.testing.assert_close(out, expected)
    assert model.head.weight.grad is not None
    with pytest.raises(StrategyNotBuiltError, match="FSDP strategy"):
        fsdp2_apply_ac(SimpleNamespace(state=SimpleNamespace()), Net())


def test_grad_scaler_takes_its_arguments():
    scaler = get_fsdp2_grad_scaler(device="cpu", init_scale=8.0, enabled=True)
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler.get_scale() == 8.0
