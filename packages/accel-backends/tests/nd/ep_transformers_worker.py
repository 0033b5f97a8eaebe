"""Worker of the transformers-split mixture-of-experts test, run on 2 real gloo processes by
``accel_testing.run_workers``: ``ep_transformers_worker.py OUT``.

A tiny random Qwen3-MoE (4 experts, 2 per token, 1 layer; float32: transformers' grouped expert
kernel refuses float64) is saved with ``save_pretrained``; every process loads it split by
transformers itself (``DistributedConfig(ep_size=2, fsdp_size=2)``), records its own experts'
local tensors, prepares it with ``ParallelismConfig(dp_shard_size=2)`` (``ep_size`` left at 1:
transformers split the experts) and trains ``STEPS`` AdamW steps. Rank 0 writes
``OUT/result.json``: whether each rank's experts were unchanged by ``prepare`` (the overwrite of
every rank's experts with rank 0's, reported against Accelerate, is what this guards), the
losses, and one process's losses over the same global batches.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from accel_backends import FullyShardedDataParallelPlugin, ParallelismConfig
from accel_core import Accelerator

STEPS = 3
GLOBAL_BATCH = 4
SEQUENCE = 8
VOCAB = 64
LR = 0.01
SAMPLES = GLOBAL_BATCH * STEPS


def tiny_moe_path(out: Path) -> Path:
    """A tiny random Qwen3-MoE saved with ``save_pretrained`` (by rank 0)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    path = out / "qwen3_moe"
    if dist.get_rank() == 0:
        torch.manual_seed(0)
        config = Qwen3MoeConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            intermediate_size=32,
            moe_intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            num_experts=4,
            num_experts_per_tok=2,
            max_position_embeddings=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            tie_word_embeddings=False,
        )
        Qwen3MoeForCausalLM(config).save_pretrained(path)
    dist.barrier()
    return path


def dataset() -> TensorDataset:
    tokens = torch.randint(
        0, VOCAB, (SAMPLES, SEQUENCE), generator=torch.Generator().manual_seed(1)
    )
    return TensorDataset(tokens, tokens.clone())


def local_experts(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This process's own part of every expert tensor (a DTensor's local shard)."""
    found = {}
    for name, parameter in model.named_parameters():
        if ".experts." in name:
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
            found[name] = local.detach().clone()
    return found


def one_process_losses(path: Path) -> list[float]:
    """The same global batches through the whole model in this process, plain PyTorch."""
    from transformers import Qwen3MoeForCausalLM

    model = Qwen3MoeForCausalLM.from_pretrained(path, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for inputs, labels in DataLoader(dataset(), batch_size=GLOBAL_BATCH):
        loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    return losses


def main() -> None:
    from transformers import DistributedConfig, Qwen3MoeForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(dp_shard_size=2),
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
    )
    path = tiny_moe_path(args.out)
    model = Qwen3MoeForCausalLM.from_pretrained(
        path, dtype=torch.float32, distributed_config=DistributedConfig(ep_size=2, fsdp_size=2)
    )
    before = local_experts(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(dataset(), batch_size=GLOBAL_BATCH // 2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    after = local_experts(model)
    unchanged = sorted(before) == sorted(after) and all(
        torch.equal(before[name], after[name]) for name in before
    )
    losses = []
    for inputs, labels in loader:
        loss = model(input_ids=inputs, labels=labels).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), "mean")))
    report = {"unchanged": unchanged, "expert_tensors": len(before)}
    reports: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, report)
    if accelerator.is_main_process:
        result = {"ranks": reports, "losses": losses, "reference": one_process_losses(path)}
        (args.out / "result.json").write_text(json.dumps(result))
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
