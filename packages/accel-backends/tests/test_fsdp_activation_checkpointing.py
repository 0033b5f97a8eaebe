"""Activation checkpointing under the FSDP2 strategy, on 2 real processes (gloo, CPU): the
layers really recompute, training is bit-for-bit the same, and every state dict keeps its keys."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from worker_env import worker_env

from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp_ac_workers.py'}"
STEPS = 5
PLAIN_KEYS = sorted(
    f"{prefix}.{kind}"
    for prefix in ("inp", "blocks.0.linear", "blocks.1.linear", "out")
    for kind in ("weight", "bias")
)


def test_checkpointed_layers_recompute_and_train_exactly_like_plain_ones(tmp_path):
    run_workers(
        2,
        function=f"{WORKERS}::checkpointing_versus_plain",
        args=[str(tmp_path), str(STEPS)],
        env=worker_env(),
        timeout=180,
    )
    results = json.loads((tmp_path / "results.json").read_text())
    plain, checkpointed, offload = (results[k] for k in ("plain", "checkpointed", "offload"))
    # Each Block's forward runs once per step without checkpointing, and twice with it (the
    # forward, then its recompute in backward): checkpointing is really engaged.
    assert plain["calls"] == [STEPS, STEPS]
    assert checkpointed["calls"] == offload["calls"] == [2 * STEPS, 2 * STEPS]
    assert plain["wrapper"] == "FSDPBlock"
    # the wrapper is sharded in the layer's place (torch's FSDP<class> of CheckpointWrapper)
    assert checkpointed["wrapper"] == "FSDPCheckpointWrapper"
    assert offload["wrapper"] == "FSDPOffloadWrapper"
    # the same FSDP units, so the same collectives
    assert plain["units"] == checkpointed["units"] == ["", "blocks.0", "blocks.1"]
    assert offload["units"] == ["", "blocks.0", "blocks.1"]
    # named_parameters shows the wrapper's attribute; every state dict hides it
    assert checkpointed["parameter_names"][2] == "blocks.0._checkpoint_wrapped_module.linear.weight"
    assert offload["parameter_names"][2] == (
        "blocks.0._checkpoint_wrapped_module._checkpoint_wrapped_module.linear.weight"
    )
    # size-based (above 60 parameters): each Block and its Linear, nested, as without
    # checkpointing; the ModuleList holding the Blocks is neither checkpointed nor a unit
    size_based = results["size_based"]
    assert size_based["wrapper"] == "FSDPCheckpointWrapper"
    assert size_based["units"] == [
        "",
        "blocks.0",
        "blocks.0._checkpoint_wrapped_module.linear",
        "blocks.1",
        "blocks.1._checkpoint_wrapped_module.linear",
    ]
    assert size_based["calls"] == [2 * STEPS, 2 * STEPS]
    assert size_based["losses"] == plain["losses"]
    for found in (plain, checkpointed, offload, size_based):
        assert found["state_dict_keys"] == PLAIN_KEYS
        assert found["checkpoint_keys"] == PLAIN_KEYS  # the DCP checkpoint save_state wrote
        # despite the renamed parameters, prepare re-pointed the optimizer at the shards
        assert found["optimizer_steps_shards"] and found["optimizer_steps_model"]
    # Exact: recomputing runs the same float64 operations on the same inputs, so activations,
    # gradients and every collective are bit-for-bit those of the plain run.
    assert plain["losses"][-1] < plain["losses"][0]
    assert checkpointed["losses"] == plain["losses"] == offload["losses"]
    weights = torch.load(tmp_path / "weights.pt")
    for name in ("checkpointed", "offload", "size_based"):
        assert sorted(weights[name]) == PLAIN_KEYS
        assert all(torch.equal(weights[name][k], weights["plain"][k]) for k in PLAIN_KEYS)
