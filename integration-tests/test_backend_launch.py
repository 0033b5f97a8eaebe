"""``accel launch --use_fsdp`` end to end: the launcher's flags (or an Accelerate config file)
reach the FSDP2 (or FSDP1) strategy in the workers, and the sharded run trains as the DDP run of
the same script (float64)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from test_end_to_end import accel_command

SCRIPT = Path(__file__).parent / "scripts" / "strategy_training.py"

pytestmark = pytest.mark.multiprocess


def _launch(out: Path, *flags: str) -> dict:
    out.mkdir()
    command = [*accel_command(), "launch", "--num_processes", "2", *flags, str(SCRIPT)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(out)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def test_use_fsdp_trains_like_ddp_with_the_flags_it_was_given(tmp_path):
    ddp = _launch(tmp_path / "ddp")
    fsdp = _launch(
        tmp_path / "fsdp",
        "--use_fsdp",
        "--fsdp_version",
        "2",
        "--fsdp_reshard_after_forward",
        "false",
        "--fsdp_state_dict_type",
        "FULL_STATE_DICT",
    )
    assert ddp == {
        "distributed_type": "DistributedType.MULTI_CPU",
        "strategy": "ddp",
        "num_processes": 2,
        "fsdp": None,
    }
    assert fsdp["distributed_type"] == "DistributedType.FSDP"
    assert fsdp["strategy"] == "fsdp"
    assert fsdp["fsdp"] == {
        "fsdp_version": 2,
        "reshard_after_forward": False,
        "sharding_strategy": "None",
        "state_dict_type": "StateDictType.FULL_STATE_DICT",
        "wrapper": "FSDPSequential",  # FSDP2 shards in place: torch's FSDP<Class>
    }
    expected = torch.load(tmp_path / "ddp" / "weights.pt")
    got = torch.load(tmp_path / "fsdp" / "weights.pt")
    assert sorted(got) == sorted(expected) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name, value in expected.items():
        assert got[name].dtype == torch.float64
        # The same sums in another order (a reduce-scatter, not an all-reduce): 1e-12, not bits.
        torch.testing.assert_close(got[name], value, rtol=1e-12, atol=1e-12)


#: An Accelerate 1.15 config file for FSDP1, as ``accelerate config`` writes it (CPU, 2 processes).
FSDP1_CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_machines: 1
num_processes: 2
machine_rank: 0
mixed_precision: 'no'
use_cpu: true
fsdp_config:
  fsdp_version: 1
  fsdp_sharding_strategy: SHARD_GRAD_OP
  fsdp_auto_wrap_policy: SIZE_BASED_WRAP
  fsdp_min_num_params: 100
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_cpu_ram_efficient_loading: true
  fsdp_use_orig_params: true
"""


def test_an_accelerate_fsdp1_config_file_trains_like_ddp(tmp_path):
    config = tmp_path / "fsdp1.yaml"
    config.write_text(FSDP1_CONFIG)
    ddp = _launch(tmp_path / "ddp")
    fsdp = _launch(tmp_path / "fsdp1", "--config_file", str(config))
    assert ddp["fsdp"] is None
    assert (fsdp["distributed_type"], fsdp["strategy"]) == ("DistributedType.FSDP", "fsdp")
    assert fsdp["fsdp"] == {
        "fsdp_version": 1,
        "reshard_after_forward": False,  # FSDP1 reads the sharding strategy instead
        "sharding_strategy": "ShardingStrategy.SHARD_GRAD_OP",
        "state_dict_type": "StateDictType.SHARDED_STATE_DICT",
        "wrapper": "FullyShardedDataParallel",
    }
    expected = torch.load(tmp_path / "ddp" / "weights.pt")
    got = torch.load(tmp_path / "fsdp1" / "weights.pt")
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        # exact on 2 processes (see accel-backends' test_fsdp1_strategy.py); SGD is elementwise
        assert torch.equal(got[name], value), name
