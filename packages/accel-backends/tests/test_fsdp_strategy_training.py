"""The FSDP2 strategy on 2 real processes (gloo, CPU): chosen by its plugin or ACCEL_STRATEGY,
training like DDP, checkpoints that continue exactly, and merge_fsdp_weights on its folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from worker_env import worker_env

from accel_backends import merge_fsdp_weights
from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp_workers.py'}"
STEPS = 8


def _run(function: str, args: list[str], env: dict[str, str] | None = None) -> None:
    run_workers(
        2,
        function=f"{WORKERS}::{function}",
        args=args,
        env=worker_env(**(env or {})),
        timeout=120,
    )


@pytest.mark.parametrize("accumulation", [1, 2])
def test_fsdp2_trains_like_ddp_exactly_in_float64(tmp_path, accumulation):
    _run("fsdp_versus_ddp", [str(tmp_path), str(STEPS), str(accumulation)])
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["chosen"] == {
        "strategy": "FSDPStrategy",
        "plugin_is_given": True,
        "is_fsdp2": True,
        "distributed_type": "True",
        # transformer-based wrapping: each Block its own unit, then the root
        "units": ["", "blocks.0", "blocks.1"],
        "sharded_rows": 4,  # inp.weight is 8 x 4: each of the 2 processes holds 4 rows
        # under no-sync (every other batch with 2 accumulation steps) nothing was
        # reduce-scattered: the sharded gradients stay unset until the synchronising batch
        "unsynced_grads_unset": [True] * (STEPS // 2 if accumulation == 2 else 0),
    }
    fsdp, ddp = results["fsdp_losses"], results["ddp_losses"]
    assert fsdp[-1] < fsdp[0] / 2, fsdp
    # Exact, not within a tolerance: in float64 (and float32 too) with 2 processes, a
    # reduce-scatter and an all-reduce both add the same two numbers (addition of two operands
    # is commutative, so the order can't differ), and both average by halving, which is exact
    # in binary floating point. Forward and backward run on the same full weights, and AdamW is
    # elementwise, so sharding changes no rounding. With accumulation both sum the two local
    # gradients in the same order before communicating. More processes would need a tolerance.
    assert fsdp == ddp
    weights = torch.load(tmp_path / "weights.pt")
    assert weights["fsdp"].keys() == weights["ddp"].keys()
    assert all(torch.equal(weights["fsdp"][k], weights["ddp"][k]) for k in weights["ddp"])
    assert all(v.dtype == torch.float64 for v in weights["fsdp"].values())


@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_save_state_then_load_state_in_a_fresh_accelerator_continues_exactly(
    tmp_path, state_dict_type
):
    config = {
        "fsdp_version": 2,
        "fsdp_state_dict_type": state_dict_type,
        "fsdp_reshard_after_forward": False,
        "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
        "fsdp_min_num_params": 60,
    }
    env = {"ACCEL_STRATEGY": "fsdp", "ACCEL_STRATEGY_CONFIG": json.dumps(config)}
    _run("save_load_continue", [str(tmp_path)], env)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["chosen"] == {
        "strategy": "FSDPStrategy",
        "state_dict_type": f"StateDictType.{state_dict_type}",
        "reshard_after_forward": False,
        # size-based wrapping above 60 parameters, bottom-up as Accelerate does: each Block's
        # Linear (72), then the Block (72 too, counting its child's); not inp (40), out (18)
        # or the ModuleList (a container torch can't shard)
        "units": ["", "blocks.0", "blocks.0.linear", "blocks.1", "blocks.1.linear"],
    }
    assert results["same"] == {"loaded": True, "losses": True, "weights": True, "moved": True}
    folder = tmp_path / "checkpoint"
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    if state_dict_type == "SHARDED_STATE_DICT":
        # Accelerate's folder names; one shard file per process, the metadata from the first
        for name in ("pytorch_model_fsdp_0", "optimizer_0"):
            assert {f"{name}/.metadata", f"{name}/__0_0.distcp", f"{name}/__1_0.distcp"} <= set(
                files
            ), files
        assert "model.safetensors" not in files
    else:
        assert {"model.safetensors", "optimizer.bin"} <= set(files), files
        assert not any(f.startswith("pytorch_model_fsdp_0/") for f in files)


def test_merge_fsdp_weights_reads_the_sharded_folder_the_strategy_writes(tmp_path):
    config = {"fsdp_version": 2}  # SHARDED_STATE_DICT, FSDP2's default
    env = {"ACCEL_STRATEGY": "fsdp", "ACCEL_STRATEGY_CONFIG": json.dumps(config)}
    _run("save_load_continue", [str(tmp_path)], env)
    merge_fsdp_weights(str(tmp_path / "checkpoint" / "pytorch_model_fsdp_0"), str(tmp_path / "m"))
    merged = load_file(tmp_path / "m" / "model.safetensors")
    expected = load_file(tmp_path / "saved_weights.safetensors")
    assert merged.keys() == expected.keys() and len(expected) == 8
    assert all(torch.equal(merged[k], expected[k]) for k in expected)
