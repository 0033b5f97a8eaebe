"""The deepspeed strategy on 2 real processes (gloo, CPU): ZeRO-1/2/3 train like DDP, the engine
and ``accumulate`` agree on the accumulation boundary, clipping comes from the config, bf16 trains,
and DummyOptim / DummyScheduler let DeepSpeed build the config's optimizer and schedule."""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed")

import torch
from deepspeed_testing import results, run

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

STEPS, BATCH, PROCESSES = 6, 4, 2


def _largest_difference(left: dict, right: dict) -> float:
    assert left.keys() == right.keys()
    return max(float((left[k] - right[k]).abs().max()) for k in left)


@pytest.mark.parametrize("accumulation", [1, 2])
def test_zero_stages_train_like_ddp(tmp_path, accumulation):
    run("versus_ddp", tmp_path, str(accumulation))
    found = results(tmp_path)
    weights = torch.load(tmp_path / "weights.pt")
    boundaries = [True] * STEPS if accumulation == 1 else [False, True] * (STEPS // 2)
    for stage in (1, 2, 3):
        info = found["infos"][f"zero{stage}"]
        describe = info.pop("describe")
        assert info == {
            "strategy": "DeepSpeedStrategy",
            "plugin_is_active": True,
            "engine": "DeepSpeedEngine",  # the prepared model is the engine...
            "unwrapped_is_net": "Net",  # ...around the user's module
            "mixed_precision": "no",
            "micro": BATCH,  # "auto", filled from the prepared loader's batch size
            "train_batch_size": BATCH * accumulation * PROCESSES,
            "gas": accumulation,
            "param_dtype": "torch.float32",
            "syncs": boundaries,
            # the engine stepped exactly on the batches where sync_gradients was True
            "global_steps": STEPS // accumulation,
        }
        assert "auto: from the data loader's batch size" in describe
        assert f"Accelerator(gradient_accumulation_steps={accumulation})" in describe
    ddp = weights["ddp"]
    if accumulation == 1:
        # Exact: with 2 processes an all-reduce and a reduce-scatter add the same two numbers
        # (two operands: the order can't differ) and halve them (exact in binary); forward and
        # backward run on the same full weights, and AdamW is elementwise, so partitioning the
        # optimizer (ZeRO-1), the gradients (ZeRO-2) or the weights (ZeRO-3) rounds nothing
        # differently.
        for stage in (1, 2, 3):
            assert _largest_difference(weights[f"zero{stage}"], ddp) == 0.0, stage
            assert found["losses"][f"zero{stage}"] == found["losses"]["ddp"]
    else:
        # ZeRO-1 reduces the accumulated gradients at the boundary, like DDP: exact. ZeRO-2/3
        # reduce each micro-batch's gradients as they come, (a1+b1)+(a2+b2) where DDP computes
        # (a1+a2)+(b1+b2): float32 addition is not associative, so the last bits differ
        # (measured: 3e-8 on weights of size ~1). 1e-6 is a few dozen ulps.
        assert _largest_difference(weights["zero1"], ddp) == 0.0
        for stage in (2, 3):
            assert _largest_difference(weights[f"zero{stage}"], ddp) < 1e-6, stage
            assert found["losses"][f"zero{stage}"] == pytest.approx(found["losses"]["ddp"], 1e-6)
    # clip_grad_norm_ returns the engine's norm of the step just taken: DDP's, before clipping
    # (the norms are summed in another order over the partitions: relative 1e-6).
    for stage in (1, 2, 3):
        assert found["norms"][f"zero{stage}"] == pytest.approx(found["norms"]["ddp"], rel=1e-6)
    if accumulation == 1:
        # gradient_clipping=0.05 in the plugin clips like DDP's clip_grad_norm_(0.05) (every norm
        # here is above 0.05); DeepSpeed divides by (norm + 1e-6) / 0.05 where torch multiplies
        # by 0.05 / (norm + 1e-6), one rounding apart (measured 9e-8).
        assert min(found["norms"]["ddp_clipped"]) > 0.05
        assert found["norms"]["clipped"] == pytest.approx(found["norms"]["ddp_clipped"], rel=1e-6)
        assert _largest_difference(weights["clipped"], weights["ddp_clipped"]) < 1e-6
        assert _largest_difference(weights["clipped"], ddp) > 1e-2  # clipping did change them
        losses = found["losses"]["ddp"]
        assert losses[-1] < losses[0] / 2, losses


def test_bf16_trains_with_bf16_weights(tmp_path):
    run("bf16_runs", tmp_path)
    for stage, found in results(tmp_path).items():
        losses = found.pop("losses")
        assert found["mixed_precision"] == "bf16", stage  # read from the config's bf16 section
        assert found["param_dtype"] == "torch.bfloat16", stage  # the engine cast the module
        assert found["state_dtypes"] == ["torch.bfloat16"], stage
        assert found["global_steps"] == STEPS
        assert min(losses[-2:]) < losses[0] / 2, (stage, losses)


def test_dummy_optimizer_and_scheduler_come_from_the_config(tmp_path):
    run("dummy_objects", tmp_path)
    found = results(tmp_path)
    scheduled = found["dummy_scheduler"]
    assert (scheduled["optimizer"], scheduled["inner"], scheduled["base"]) == (
        "DeepSpeedOptimizerWrapper",
        "DeepSpeedZeroOptimizer",
        "AdamW",  # torch's AdamW, which "torch_adam": true makes DeepSpeed build (no C++ op)
    )
    assert scheduled["scheduler"] == "DeepSpeedSchedulerWrapper"
    # DeepSpeed's WarmupLR, linear: lr = max_lr * k / warmup_num_steps after step k+1 (k < 4),
    # then max_lr; max_lr=0.05 from DummyOptim(lr=0.05), 4 steps from DummyScheduler.
    assert scheduled["lrs"] == pytest.approx([0.0, 0.0125, 0.025, 0.0375, 0.05, 0.05])
    # The first two steps ran at lr 0 (the schedule starts at min_lr): the weights stayed.
    assert scheduled["moved"] == [False, False, True, True, True, True]
    rows = {line.split()[0]: line for line in scheduled["describe"].splitlines()[2:]}
    assert "0.05" in rows["optimizer.params.lr"]
    assert "auto: from DummyOptim(lr=...)" in rows["optimizer.params.lr"]
    assert (
        "auto: from DummyScheduler(warmup_num_steps=...)"
        in rows["scheduler.params.warmup_num_steps"]
    )
    assert found["dummy_optim"]["moved"] == [True] * STEPS
    built = torch.load(tmp_path / "dummy_optim.pt")
    given = torch.load(tmp_path / "torch_adamw.pt")
    # DeepSpeed's AdamW from the config (lr and weight decay filled from DummyOptim) is the user's
    # torch.optim.AdamW(lr=0.05, weight_decay=0) exactly.
    assert _largest_difference(built, given) == 0.0
