"""Interface 1 of DESIGN.md: what ``accel launch`` writes, accel-ops reads, field by field."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
from test_end_to_end import accel_command

from accel_ops import LaunchEnvironment
from accel_testing import free_port

SCRIPT = Path(__file__).parent / "scripts" / "print_launch_environment.py"


@pytest.mark.multiprocess
def test_every_field_round_trips_from_the_launcher_to_the_workers(tmp_path):
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\n")
    command = [
        *accel_command(),
        "launch",
        "--config_file",
        str(config),
        "--num_processes",
        "2",
        "--cpu",
        "--mixed_precision",
        "bf16",
        "--debug",
        "--gradient_accumulation_steps",
        "4",
        "--dynamo_backend",
        "inductor",
        "--dynamo_mode",
        "reduce-overhead",
        "--dynamo_use_fullgraph",
        "--main_process_port",
        str(port),
        "--use_fsdp",
        "--fsdp_sharding_strategy",
        "FULL_SHARD",
        "--log_dir",
        str(tmp_path / "logs"),
        str(SCRIPT),
    ]
    env = {
        **os.environ,
        "ACCEL_PROCESS_GROUP_TIMEOUT": "77.5",
        "ACCEL_CONFIG_FILE": str(config),
        "OMP_NUM_THREADS": "1",
        "OUT": str(tmp_path),
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = [json.loads((tmp_path / f"environment-{rank}.json").read_text()) for rank in (0, 1)]
    common = {
        "world_size": 2,
        "local_world_size": 2,
        "group_rank": 0,
        "master_addr": "127.0.0.1",
        "master_port": port,
        "use_cpu": True,
        "mixed_precision": "bf16",
        "debug": True,
        "strategy": "fsdp",
        "strategy_config": {"fsdp_sharding_strategy": "FULL_SHARD"},
        "dynamo_backend": "inductor",
        "dynamo_mode": "reduce-overhead",
        "dynamo_use_fullgraph": True,
        "dynamo_use_dynamic": False,
        "gradient_accumulation_steps": 4,
        "process_group_timeout": 77.5,
        "num_machines": 1,
        "config_file": str(config),
        "hang_report_dir": str(tmp_path / "logs" / "inflight"),
        "torch_device": None,  # set by hand only (ACCEL_TORCH_DEVICE / ACCELERATE_TORCH_DEVICE)
    }
    expected = [{**common, "rank": rank, "local_rank": rank} for rank in (0, 1)]
    assert seen == expected
    # the test covers every field the parser has: a new field must be added here
    assert set(seen[0]) == {f.name for f in dataclasses.fields(LaunchEnvironment)}
