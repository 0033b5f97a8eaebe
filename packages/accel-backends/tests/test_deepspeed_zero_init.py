"""``zero.Init`` under the deepspeed strategy on 2 real processes: with ZeRO-3 and
``zero3_init_flag``, ``Accelerator.init_module()`` builds the model already partitioned (each
process holds half of every parameter), ``DeepSpeedPlugin.zero3_init_context_manager`` turns it
off or on, transformers' ``is_deepspeed_zero3_enabled()`` follows, and training matches the same
model built whole and partitioned by ``prepare()``."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("deepspeed")

import torch
from deepspeed_testing import FEATURE_WORKERS, results, run

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

# Net of deepspeed_workers: Linear(4, 8), Linear(8, 8), Linear(8, 2).
SIZES = {
    "inp.weight": 32,
    "inp.bias": 8,
    "mid.weight": 64,
    "mid.bias": 8,
    "out.weight": 16,
    "out.bias": 2,
}
# [ds_numel (the full size), ds_tensor.numel() (this process's half), local numel (0: the
# parameter itself holds nothing until gathered)]
PARTITIONED = {name: [size, size // 2, 0] for name, size in SIZES.items()}
WHOLE = {name: [-1, -1, size] for name, size in SIZES.items()}  # a plain parameter


def test_init_module_builds_partitioned_and_trains_the_same(tmp_path):
    run("zero_init_runs", tmp_path, workers=FEATURE_WORKERS)
    found = results(tmp_path)
    tensors = torch.load(tmp_path / "weights.pt")
    assert found["partitioned"] == PARTITIONED
    assert found["partitioned_by_rank"] == [PARTITIONED, PARTITIONED]
    # The two halves are the model's initial weights, rank 0 the first half, rank 1 the second.
    for name, start in tensors["start"].items():
        joined = torch.cat([tensors["shares0"][name], tensors["shares1"][name]])
        assert torch.equal(joined, start.flatten()), name
    assert found["off"] == WHOLE  # zero3_init_context_manager(enable=False)
    assert found["on"] == PARTITIONED  # zero3_init_context_manager(enable=True), flag off
    assert found["unbuilt"] == WHOLE  # built outside init_module: whole until prepare()
    # Exact: the same seed gives the same initial weights (zero.Init runs each module's own
    # initialisation, then partitions), and from prepare() on both runs are the same ZeRO-3.
    assert found["zero_init_losses"] == found["whole_losses"]
    assert (
        max(float((tensors["zero_init"][k] - tensors["whole"][k]).abs().max()) for k in SIZES)
        == 0.0
    )
    losses = found["zero_init_losses"]
    assert losses[-1] < losses[0] / 2, losses
    if importlib.util.find_spec("transformers") is None:
        assert found["zero_init_transformers"] is None
        return
    # transformers' is_deepspeed_zero3_enabled() (from_pretrained builds under zero.Init then)
    # follows zero3_init_flag: on for the flagged plugin, off inside enable=False and back after;
    # off for a plugin without the flag, on inside enable=True.
    assert [found[key] for key in ("zero_init_transformers", "off_transformers")] == [True, False]
    assert [found[key] for key in ("restored_transformers", "whole_transformers")] == [True, False]
    assert found["on_transformers"] is True
