"""The model of the ND and pipeline benchmarks: a stack of residual feed-forward blocks and a
linear head. Each ``Block`` is the unit FSDP shards (``transformer_cls_names_to_wrap=["Block"]``);
its two Linears are what tensor parallelism splits and its place in the stack what a pipeline
stage cuts at."""

from __future__ import annotations

import torch


class Block(torch.nn.Module):
    """A residual feed-forward layer: ``x + down(gelu(up(norm(x))))``."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(torch.nn.Module):
    """``depth`` blocks, then a ``width`` x ``width`` head."""

    def __init__(self, width: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(width, hidden) for _ in range(depth)])
        self.head = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def new_model(width: int, hidden: int, depth: int) -> Net:
    """The model, its weights drawn from seed 0 (every process and library builds the same)."""
    torch.manual_seed(0)
    return Net(width, hidden, depth)
