"""Small models and snapshots for the tests of what a failed load leaves behind."""

from __future__ import annotations

import torch
from torch import nn

from accel_bigmodel import init_empty_weights


class WithBuffers(nn.Module):
    """A linear layer plus an integer and a bool buffer (both saved in the state dict)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("counts", torch.arange(4))
        self.register_buffer("mask", torch.tensor([True, False, True, False]))


def seq_model(seed: int = 0) -> nn.Module:
    """Three linear layers (sharded at 300 bytes: one layer per shard)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 4))


def empty_seq_model() -> nn.Module:
    with init_empty_weights():
        return seq_model()


def snapshot(model: nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Every state-dict entry: the object itself and a copy of its value."""
    return {
        name: (tensor, tensor.detach().clone())
        for name, tensor in model.state_dict(keep_vars=True).items()
    }


def assert_unchanged(model: nn.Module, before: dict[str, tuple[torch.Tensor, torch.Tensor]]):
    """The model holds the very same tensor objects, with the same dtypes and values."""
    now = model.state_dict(keep_vars=True)
    assert list(now) == list(before)
    for name, (original, value) in before.items():
        assert now[name] is original, f"{name} was replaced"
        assert now[name].dtype == value.dtype, name
        assert now[name].device == value.device, name
        if value.device.type != "meta":  # meta tensors have no values to compare
            assert torch.equal(now[name].detach(), value), f"{name} changed value"
