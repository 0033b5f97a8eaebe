"""Accelerate's FSDP functions on FSDP2 (and FSDP1) models, on 2 real processes (gloo, CPU): the
files and folders Accelerate 1.15 writes, round trips that continue training exactly,
merge_fsdp_weights on what save_fsdp_model writes, fsdp2_prepare_model and loading full weights
from rank 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from worker_env import worker_env

from accel_backends import (
    FullyShardedDataParallelPlugin,
    load_fsdp_model,
    load_fsdp_optimizer,
    merge_fsdp_weights,
    save_fsdp_model,
    save_fsdp_optimizer,
)
from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp_calls_workers.py'}"


def _run(function: str, folder: Path, *args: str) -> None:
    run_workers(
        2,
        function=f"{WORKERS}::{function}",
        args=[str(folder), *args],
        env=worker_env(),
        timeout=180,
    )


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("fsdp_version", [2, 1])
def test_save_and_load_round_trips_continue_exactly_under_accelerates_names(tmp_path, fsdp_version):
    _run("round_trips", tmp_path, str(fsdp_version))
    # Accelerate 1.15's names (accelerate/utils/fsdp_utils.py: FSDP_MODEL_NAME, OPTIMIZER_NAME)
    shard = ["__0_0.distcp", "__1_0.distcp", ".metadata"]
    assert _files(tmp_path / "SHARDED_STATE_DICT_dcp_0") == sorted(
        [f"pytorch_model_fsdp_0/{f}" for f in shard] + [f"optimizer_0/{f}" for f in shard]
    )
    assert _files(tmp_path / "SHARDED_STATE_DICT_ranks_1") == [
        "optimizer_1_rank0.bin",
        "optimizer_1_rank1.bin",
        "pytorch_model_fsdp_1_rank0.bin",
        "pytorch_model_fsdp_1_rank1.bin",
    ]
    assert _files(tmp_path / "FULL_STATE_DICT_dcp_0") == ["optimizer.bin", "pytorch_model_fsdp.bin"]
    assert _files(tmp_path / "FULL_STATE_DICT_dcp_1") == [
        "optimizer_1.bin",
        "pytorch_model_fsdp_1.bin",
    ]
    expected = torch.load(tmp_path / "at_save.pt")
    full = torch.load(tmp_path / "FULL_STATE_DICT_dcp_1" / "pytorch_model_fsdp_1.bin")
    assert full.keys() == expected.keys() and all(torch.equal(full[k], expected[k]) for k in full)
    optimizer = torch.load(tmp_path / "FULL_STATE_DICT_dcp_0" / "optimizer.bin")
    assert sorted(optimizer["state"]) == sorted(expected)  # keyed by parameter names
    for rank in (0, 1):
        results = json.loads((tmp_path / f"results_{rank}.json").read_text())
        assert results == {
            name: {
                "keys": [[], []],
                "loaded_model": True,
                "loaded_optimizer": True,
                # exact: the same states, batches and collectives as the run that went on
                "continued": True,
            }
            for name in (
                "SHARDED_STATE_DICT_dcp_0",
                "SHARDED_STATE_DICT_ranks_1",
                "FULL_STATE_DICT_dcp_0",
                "FULL_STATE_DICT_dcp_1",
            )
        }, rank
    # merge_fsdp_weights reads the folder save_fsdp_model wrote
    merge_fsdp_weights(
        str(tmp_path / "SHARDED_STATE_DICT_dcp_0" / "pytorch_model_fsdp_0"), str(tmp_path / "m")
    )
    merged = load_file(tmp_path / "m" / "model.safetensors")
    assert merged.keys() == expected.keys() and len(merged) == 8
    assert all(torch.equal(merged[k], expected[k]) for k in expected)


def test_prepare_model_and_loading_full_weights_from_rank_0(tmp_path):
    _run("prepare_and_load_full", tmp_path)
    for rank in (0, 1):
        found = json.loads((tmp_path / f"prepare_{rank}.json").read_text())
        assert found == {
            "same_object": True,  # sharded in place; a sharded model is returned as it is
            "units": ["", "blocks.0", "blocks.1"],
            "rows": 4,
            "loaded_from_rank0": True,  # rank 1 passed {} and received its shards
            # cpu_ram_efficient_loading: rank 1 began with zeros, yet started from rank 0's
            # weights and persistent buffer, kept its non-persistent one through the meta
            # device, and trained exactly as the run where every rank loaded the weights
            "efficient_start": True,
            "efficient_losses": True,
            "efficient_weights": True,
            "efficient_buffers": {"shift": [0.5, 0.5], "scale": [2.0, 2.0]},
            "upcast": ["torch.float32"],  # bf16 parameters, fp32 master weights
            "computes_in": "torch.bfloat16",  # the plugin's mixed-precision policy
        }, rank


def test_a_full_state_dict_lacking_a_key_is_the_same_error_on_every_process(tmp_path):
    _run("full_state_dict_lacking_a_key", tmp_path)  # returns: no process waits for a scatter
    messages = {(tmp_path / f"missing_{rank}.txt").read_text() for rank in (0, 1)}
    assert messages == {
        "\"the full state dict on process 0 lacks ['out.bias'] of the sharded model (7 entries "
        'given, the model has 8)"'
    }


@pytest.mark.parametrize(
    ("function", "args"),
    [
        (save_fsdp_model, (None, None, "out")),
        (load_fsdp_model, (None, None, "out")),
        (save_fsdp_optimizer, (None, None, None, "out")),
        (load_fsdp_optimizer, (None, None, None, "out")),
    ],
)
def test_local_state_dict_plugins_are_refused_before_anything_is_written(function, args):
    plugin = FullyShardedDataParallelPlugin(fsdp_version=1, state_dict_type="LOCAL_STATE_DICT")
    with pytest.raises(ValueError, match=r"LOCAL_STATE_DICT is not supported"):
        function(plugin, *args)
