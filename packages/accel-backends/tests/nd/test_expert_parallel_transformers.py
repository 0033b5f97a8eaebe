"""Expert parallelism as transformers splits a mixture-of-experts model itself
(``DistributedConfig(ep_size=2, fsdp_size=2)``), prepared by accel (issue 32): each rank keeps
its own experts through ``prepare`` (never broadcast over: Accelerate's FSDP2 path overwrote
every rank's experts with rank 0's), and the run trains as one process of plain PyTorch does
over the same global batches.

Tolerance: float32 (transformers' grouped expert kernel refuses float64); the 2-process run sums
the token losses and the gradients in another order than one process (two halves of the batch,
then an average over the ranks), so each step's loss agrees to float32 rounding over a few
steps: 1e-5 relative (measured: equal to the last bit in this run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel_testing import run_workers

pytest.importorskip("transformers")

WORKER = Path(__file__).with_name("ep_transformers_workers.py")
#: transformers splits a model while loading only when ``accelerate`` imports (accel's alias).
AS_ACCELERATE = {"ACCEL_AS_ACCELERATE": "1"}


def _tiny_moe(folder: Path) -> None:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        tie_word_embeddings=False,
    )
    Qwen3MoeForCausalLM(config).save_pretrained(folder)


def _one_process_losses(folder: Path) -> list[float]:
    """The same steps in one process of plain PyTorch: the global batch, SGD."""
    import importlib.util

    from transformers import AutoModelForCausalLM

    spec = importlib.util.spec_from_file_location("ep_workers", WORKER)
    workers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workers)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    optimizer = torch.optim.SGD(model.parameters(), lr=workers.LR)
    losses = []
    for ids in workers.batches(model.config.vocab_size):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_each_rank_keeps_its_own_experts_and_trains_as_one_process(tmp_path):
    model_dir = tmp_path / "model"
    _tiny_moe(model_dir)
    run_workers(
        2, script=WORKER, args=[str(model_dir), str(tmp_path)], env=AS_ACCELERATE, timeout=300
    )
    ranks = json.loads((tmp_path / "result.json").read_text())
    for rank in ranks:
        experts = rank["experts"]
        assert len(experts) == 4, experts  # gate_up and down projections of 2 layers
        for name, checks in experts.items():
            assert checks["unchanged_by_prepare"], (rank["rank"], name)
            assert checks["is_this_ranks_slice"], (rank["rank"], name)
    # the global batch's loss is the mean of the two ranks' (equal token counts)
    distributed = [
        sum(pair) / 2 for pair in zip(ranks[0]["losses"], ranks[1]["losses"], strict=True)
    ]
    assert distributed == pytest.approx(_one_process_losses(model_dir), rel=1e-5)
