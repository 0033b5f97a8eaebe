"""Resolving launch values (flag > environment > config file > default); the worker environment."""

from __future__ import annotations

import argparse
import json

import pytest
from conftest import FIXTURES

from accel_launch import AccelLaunchError, load_config
from accel_launch.launch.options import add_options
from accel_launch.launch.resolve import resolve
from accel_launch.launch.slurm import expand_nodelist, slurm_layout
from accel_launch.launch.workerenv import accel_environment


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser)
    return parser.parse_args(list(argv))


def test_precedence_flag_env_config_default():
    config = {"num_processes": 4, "mixed_precision": "fp16", "debug": True, "num_machines": 1}
    env = {"ACCEL_MIXED_PRECISION": "bf16", "ACCEL_NUM_PROCESSES": "3"}
    plan = resolve(flags("--num_processes", "2", "--cpu"), env, config, "c.yaml")
    assert (plan["num_processes"], plan.values["num_processes"].source) == (2, "flag")
    assert (plan["mixed_precision"], plan.values["mixed_precision"].source) == (
        "bf16",
        "env ACCEL_MIXED_PRECISION",
    )
    assert (plan["debug"], plan.values["debug"].source) == (True, "config file c.yaml")
    assert (plan["rdzv_backend"], plan.values["rdzv_backend"].source) == ("static", "default")
    plan = resolve(flags(), env, config, "c.yaml")
    assert (plan["num_processes"], plan.values["num_processes"].source) == (
        3,
        "env ACCEL_NUM_PROCESSES",
    )


def test_dashed_and_underscored_names_are_the_same_option():
    assert flags("--num-processes", "3").num_processes == 3
    assert flags("--num_processes", "3").num_processes == 3
    assert flags("--fsdp-offload-params", "true").fsdp_offload_params is True
    assert flags("--tpu").use_xla is True


def test_several_processes_without_gpus_is_multi_cpu_ddp(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    plan = resolve(flags("--num_processes", "3"), {}, {})
    assert plan.distributed_type.value == "MULTI_CPU"
    assert plan.nproc_per_node == 3 and plan.world_size == 3
    env = accel_environment(plan)
    assert env["ACCEL_STRATEGY"] == "ddp"
    assert env["ACCEL_USE_CPU"] == "true"
    assert env["OMP_NUM_THREADS"] == "1"


def test_multi_gpu_without_gpus_or_a_count_is_an_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(AccelLaunchError, match=r"MULTI_GPU \(flag\) found no GPU"):
        resolve(flags("--multi_gpu"), {}, {})
    assert resolve(flags("--multi_gpu", "--num_processes", "2", "--cpu"), {}, {}).world_size == 2


def test_single_process_sets_no_strategy():
    plan = resolve(flags(), {}, {})
    assert plan.distributed_type.value == "NO" and plan.world_size == 1
    env = accel_environment(plan)
    assert "ACCEL_STRATEGY" not in env and "OMP_NUM_THREADS" not in env
    assert env["ACCEL_MIXED_PRECISION"] == "no"


def test_deepspeed_config_and_flags_merge_into_strategy_config():
    config = load_config(FIXTURES / "deepspeed.yaml")
    plan = resolve(flags("--zero_stage", "3", "--offload_param_device", "cpu"), {}, config, "ds")
    assert plan.strategy == "deepspeed"
    env = accel_environment(plan)
    assert json.loads(env["ACCEL_STRATEGY_CONFIG"]) == {
        "gradient_accumulation_steps": 4,
        "gradient_clipping": 1.0,
        "offload_optimizer_device": "cpu",
        "offload_param_device": "cpu",
        "zero3_init_flag": False,
        "zero_stage": 3,
    }
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"
    assert env["ACCEL_MIXED_PRECISION"] == "fp16"


def test_use_fsdp_flag_overrides_a_ddp_config():
    config = load_config(FIXTURES / "multi_gpu.yaml")
    plan = resolve(
        flags("--use_fsdp", "--fsdp_sharding_strategy", "SHARD_GRAD_OP", "--cpu"), {}, config, "x"
    )
    env = accel_environment(plan)
    assert env["ACCEL_STRATEGY"] == "fsdp"
    assert json.loads(env["ACCEL_STRATEGY_CONFIG"]) == {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}
    assert env["ACCEL_DYNAMO_BACKEND"] == "inductor"
    assert env["ACCEL_DYNAMO_MODE"] == "default"
    assert env["ACCEL_DYNAMO_USE_FULLGRAPH"] == env["ACCEL_DYNAMO_USE_DYNAMIC"] == "false"
    assert env["ACCEL_DEBUG_MODE"] == "true"
    assert "CUDA_VISIBLE_DEVICES" not in env  # --cpu


def test_dynamo_options_reach_the_workers_only_with_a_backend():
    plan = resolve(
        flags("--dynamo_backend", "eager", "--dynamo_mode", "max-autotune", "--dynamo_use_dynamic"),
        {},
        {"dynamo_config": {"dynamo_use_fullgraph": True}},
    )
    env = accel_environment(plan)
    assert (env["ACCEL_DYNAMO_BACKEND"], env["ACCEL_DYNAMO_MODE"]) == ("eager", "max-autotune")
    assert env["ACCEL_DYNAMO_USE_FULLGRAPH"] == env["ACCEL_DYNAMO_USE_DYNAMIC"] == "true"
    assert "ACCEL_DYNAMO_MODE" not in accel_environment(
        resolve(flags("--dynamo_mode", "default"), {}, {})
    )


def test_gpu_ids_become_cuda_visible_devices():
    config = load_config(FIXTURES / "multi_gpu.yaml")
    plan = resolve(flags(), {}, config, "x")
    assert plan.distributed_type.value == "MULTI_GPU"
    assert accel_environment(plan)["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_inconsistent_values_are_clear_errors():
    with pytest.raises(
        AccelLaunchError, match=r"--num_processes 3 .* multiple of --num_machines 2"
    ):
        resolve(
            flags("--num_processes", "3", "--num_machines", "2", "--main_process_ip", "h"), {}, {}
        )
    with pytest.raises(AccelLaunchError, match="--machine_rank 2 is out of range"):
        resolve(
            flags("--num_machines", "2", "--machine_rank", "2", "--main_process_ip", "h"), {}, {}
        )
    with pytest.raises(AccelLaunchError, match="--num_machines 2 needs --main_process_ip"):
        resolve(flags("--num_machines", "2", "--num_processes", "2"), {}, {})
    with pytest.raises(AccelLaunchError, match="ACCEL_NUM_PROCESSES='two'"):
        resolve(flags(), {"ACCEL_NUM_PROCESSES": "two"}, {})
    with pytest.raises(AccelLaunchError, match=r"ACCEL_MIXED_PRECISION='fp8'.*no, fp16, bf16"):
        resolve(flags(), {"ACCEL_MIXED_PRECISION": "fp8"}, {})


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("gpu7", ["gpu7"]),
        ("a[1,3-4],b[09-10]-ib,c", ["a1", "a3", "a4", "b09-ib", "b10-ib", "c"]),
    ],
)
def test_slurm_nodelists_expand(nodelist: str, hosts: list[str]):
    assert expand_nodelist(nodelist) == hosts


def test_slurm_variables_give_the_machine_layout():
    env = {
        "SLURM_NNODES": "3",
        "SLURM_NODEID": "2",
        "SLURM_PROCID": "2",
        "SLURM_JOB_NODELIST": "node[07-09]",
    }
    assert slurm_layout(env) == {
        "num_machines": (3, "SLURM_NNODES"),
        "machine_rank": (2, "SLURM_NODEID"),
        "main_process_ip": ("node07", "SLURM_JOB_NODELIST"),
    }
    plan = resolve(flags("--num_processes", "6"), env, {"num_machines": 1})
    assert plan["num_machines"] == 3 and plan["machine_rank"] == 2
    assert plan["main_process_ip"] == "node07"
    assert plan.values["machine_rank"].source == "env SLURM_NODEID"
    assert plan.nproc_per_node == 2
    # a flag still wins over SLURM
    assert (
        resolve(flags("--machine_rank", "0", "--num_processes", "6"), env, {})["machine_rank"] == 0
    )
    assert slurm_layout({}) == {}
