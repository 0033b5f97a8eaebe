"""Plain sharding for the benchmarks' raw-PyTorch baselines: tensors in order, a new shard when
the next tensor would pass the limit, transformers' file names."""

from __future__ import annotations

import torch


def plan_raw_shards(
    state: dict[str, torch.Tensor], limit: int
) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """``[(file name, tensors), ...]`` for ``state`` in shards of at most ``limit`` bytes."""
    shards: list[dict[str, torch.Tensor]] = []
    current: dict[str, torch.Tensor] = {}
    used = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and used + nbytes > limit:
            shards.append(current)
            current, used = {}, 0
        current[name] = tensor
        used += nbytes
    shards.append(current)
    count = len(shards)
    return [(f"model-{i + 1:05d}-of-{count:05d}.safetensors", s) for i, s in enumerate(shards)]
