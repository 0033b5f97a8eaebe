"""Worker of test_expert_parallel_transformers.py: a tiny Qwen3-MoE that transformers splits
itself (``DistributedConfig(ep_size=2, fsdp_size=2)`` on 2 processes: each rank holds half the
experts, the model sharded with FSDP2 by transformers), prepared by accel and trained a few steps.

Usage: ``ep_transformers_workers.py MODEL_DIR OUT_DIR``. Rank 0 writes ``OUT_DIR/result.json``:
for every rank, its expert tensors' names and whether each is, bit for bit, the same before and
after ``prepare`` and the slice of the whole model's experts the rank should hold; the losses of
each step (each rank's, to compare with one process of plain PyTorch over the same global
batches, computed by the test).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

from accel_backends import FullyShardedDataParallelPlugin
from accel_core import Accelerator
from accel_ops import gather_object

STEPS, PER_RANK, SEQUENCE, LR = 3, 2, 8, 1e-3


def batches(vocab: int) -> torch.Tensor:
    """Every step's global batch (``STEPS`` x ``2 * PER_RANK`` x ``SEQUENCE`` token ids)."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (STEPS, 2 * PER_RANK, SEQUENCE), generator=generator)


def local_experts(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This rank's part of every expert parameter (a DTensor's local tensor)."""
    found = {}
    for name, parameter in model.named_parameters():
        if ".experts." in name:
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
            found[name] = local.detach().clone()
    return found


def main() -> None:
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, distributed_config=DistributedConfig(ep_size=2, fsdp_size=2), dtype=torch.float32
    )
    before = local_experts(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    after = local_experts(accelerator.unwrap_model(model))
    # the whole model as one process loads it (transformers fuses the checkpoint's per-expert
    # weights into one [num_experts, ...] tensor per projection on loading)
    whole = dict(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).named_parameters()
    )
    rank = accelerator.process_index
    report = {}
    for name, tensor in before.items():
        full = whole[name].detach()  # [num_experts, ...]: this rank holds its contiguous half
        half = full.shape[0] // 2
        expected = full[rank * half : (rank + 1) * half]
        report[name] = {
            "unchanged_by_prepare": torch.equal(tensor, after[name]),
            "is_this_ranks_slice": tuple(tensor.shape) == tuple(expected.shape)
            and torch.equal(tensor, expected),
        }
    losses = []
    for step_batch in batches(model.config.vocab_size):
        ids = step_batch[rank * PER_RANK : (rank + 1) * PER_RANK]
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    everything = gather_object([{"rank": rank, "experts": report, "losses": losses}])
    if accelerator.is_main_process:
        (out / "result.json").write_text(json.dumps(everything))
    accelerator.end_training()


if __name__ == "__main__":
    main()
