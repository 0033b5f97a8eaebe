"""FSDP1 (``FullyShardedDataParallel``, ``fsdp_version=1``) under the fsdp strategy on 2 real
processes (gloo, CPU): every sharding strategy and option trains exactly like DDP, clipping
matches, checkpoints continue exactly (and load under FSDP2), process 0's weights reach every
process, and bf16 mixed precision keeps float32 master weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from worker_env import worker_env

from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp1_workers.py'}"
STEPS = 6
VARIANTS = [
    "full_shard",
    "shard_grad_op",
    "no_shard",
    "hybrid",
    "hybrid_zero2",
    "size_based",
    "checkpointed",
    "prefetch",
    "offload",
]


def _run(function: str, args: list[str]) -> dict:
    folder = Path(args[0])
    run_workers(
        2,
        function=f"{WORKERS}::{function}",
        args=args,
        env=worker_env(),
        timeout=180,
    )
    return json.loads((folder / "results.json").read_text())


def test_every_sharding_strategy_and_option_trains_exactly_like_ddp(tmp_path):
    results = _run("variants_versus_ddp", [str(tmp_path), str(STEPS), "2", ",".join(VARIANTS)])
    weights = torch.load(tmp_path / "weights.pt")
    ddp = results.pop("ddp")
    assert ddp["losses"][-1] < ddp["losses"][0] / 2, ddp["losses"]
    block_units = ["", "_fsdp_wrapped_module.blocks.0", "_fsdp_wrapped_module.blocks.1"]
    for name, found in results.items():
        # Exact in float64 on 2 processes, with 2 accumulation steps (no_sync on the first):
        # as for FSDP2 (test_fsdp_strategy_training.py), a reduce-scatter of flat parameters
        # and DDP's all-reduce add the same two numbers and halve them, and AdamW is
        # elementwise, so sharding, flattening, prefetching or recomputing changes no rounding.
        assert found["losses"] == ddp["losses"], name
        assert all(torch.equal(weights[name][k], weights["ddp"][k]) for k in weights["ddp"]), name
        assert (found["wrapper"], found["unwrapped"], found["is_fsdp2"]) == (
            "FullyShardedDataParallel",
            "Net",
            False,
        ), name
        expected_units = (
            ["", "_fsdp_wrapped_module.blocks.0.linear", "_fsdp_wrapped_module.blocks.1.linear"]
            if name == "size_based"  # 72 parameters each, over 60; the Block counts them once
            else block_units
        )
        assert found["units"] == expected_units, name
    assert results["full_shard"]["strategy"] == "ShardingStrategy.FULL_SHARD"
    assert results["hybrid_zero2"]["strategy"] == "ShardingStrategy._HYBRID_SHARD_ZERO2"
    # the hybrid ones replicate across nodes and shard within one: 1 node of 2 processes
    assert results["hybrid"]["mesh"] == [1, 2] and results["full_shard"]["mesh"] == [2]
    # use_orig_params keeps the 2 parameter groups; flat parameters merge them, with a warning
    assert (results["shard_grad_op"]["groups"], results["shard_grad_op"]["merge_warned"]) == (
        2,
        False,
    )
    assert (results["full_shard"]["groups"], results["full_shard"]["merge_warned"]) == (1, True)


def test_clip_grad_norm_matches_ddp_under_sharded_replicated_and_hybrid(tmp_path):
    results = _run("clipping_versus_ddp", [str(tmp_path)])
    weights = torch.load(tmp_path / "weights.pt")
    ddp = results.pop("None")
    assert ddp > 0.1  # so clipping to 0.1 changed the step
    for name, norm in results.items():
        # float32: the shards' squared norms are summed across processes, DDP sums one vector
        assert norm == pytest.approx(ddp, rel=1e-6), name
        for key, expected in weights["None"].items():
            torch.testing.assert_close(weights[name][key], expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("state_dict_type", "use_orig_params"),
    [("SHARDED_STATE_DICT", "0"), ("FULL_STATE_DICT", "1")],
)
def test_save_state_then_load_state_continues_exactly_and_fsdp2_reads_it(
    tmp_path, state_dict_type, use_orig_params
):
    results = _run("save_load_continue", [str(tmp_path), state_dict_type, use_orig_params])
    assert results["same"] == {
        "loaded": True,
        "losses": True,
        "weights": True,
        "fsdp2_loaded": True,
        "fsdp2_losses": True,
    }
    folder = tmp_path / "checkpoint"
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    if state_dict_type == "SHARDED_STATE_DICT":
        assert {"pytorch_model_fsdp_0/.metadata", "optimizer_0/__1_0.distcp"} <= files, files
    else:
        assert {"model.safetensors", "optimizer.bin"} <= files, files


def test_cpu_ram_efficient_loading_gives_every_process_rank0s_weights(tmp_path):
    # process 1 builds its model on the meta device; torch refuses sync_module_states for CPU
    # tensors, so on a CPU run the strategy broadcasts before wrapping
    results = _run("rank0_weights_reach_every_process", [str(tmp_path)])
    assert results == {"synced": True, "equal": True, "names_everywhere": True}


def test_bf16_keeps_float32_master_weights_and_a_mid_cycle_save_warns(tmp_path):
    results = _run("bf16_mixed_precision", [str(tmp_path)])
    assert results["param_dtype"] == "torch.bfloat16"
    assert results["flat_dtypes"] == ["torch.float32"]
    assert results["output_dtype"] == "torch.float32"  # Accelerate's fp32 outputs
    losses = results["losses"]
    assert losses[-1] < losses[0] / 4, losses
    assert results["mid_cycle_warned"] is True
    assert results["prepared_twice_is_the_same"] is True
