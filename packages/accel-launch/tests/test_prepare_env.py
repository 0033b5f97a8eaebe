"""Accelerate's launch helpers over accel launch's code: same command, same worker environment."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from conftest import clean_env, run_accel

from accel_launch import (
    AccelLaunchError,
    env_var_path_add,
    prepare_deepspeed_cmd_env,
    prepare_extend_env_parallelism_config,
    prepare_multi_gpu_env,
    prepare_sagemager_args_inputs,
    prepare_simple_launcher_cmd_env,
    prepare_tpu,
    setup_fp8_env,
)
from accel_launch.cli import build_parser

pytestmark = pytest.mark.usefixtures("no_launch_variables")


def launch_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["launch", *argv])


def dry_run_environment(*argv: str) -> dict[str, str]:
    """The worker environment `accel launch --dry-run ARGV` prints."""
    env = clean_env(CUDA_VISIBLE_DEVICES="", XDG_CONFIG_HOME=os.environ["XDG_CONFIG_HOME"])
    done = run_accel("launch", "--dry-run", *argv, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("worker environment (set by accel launch):") + 1
    found = {}
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        key, _, value = line.strip().partition("=")
        found[key] = value
    return found


def test_simple_launcher_gives_accel_launchs_command_and_environment():
    argv = ("--cpu", "--mixed_precision", "bf16", "--debug", "train.py", "--lr", "0.1")
    command, env = prepare_simple_launcher_cmd_env(launch_args(*argv))
    assert command == [sys.executable, "train.py", "--lr", "0.1"]
    printed = dry_run_environment(*argv)
    assert printed["ACCEL_MIXED_PRECISION"] == "bf16"
    assert {key: env[key] for key in printed} == printed
    assert env["PATH"] == os.environ["PATH"]  # this process's environment underneath
    assert "MASTER_PORT" not in env  # one process


def test_simple_launcher_module_and_no_python():
    command, _ = prepare_simple_launcher_cmd_env(launch_args("--cpu", "-m", "pkg.train", "x"))
    assert command == [sys.executable, "-m", "pkg.train", "x"]
    command, _ = prepare_simple_launcher_cmd_env(launch_args("--no_python", "./run.sh"))
    assert command == ["./run.sh"]
    with pytest.raises(ValueError, match="cannot be used together"):
        prepare_simple_launcher_cmd_env(launch_args("-m", "--no_python", "x"))


def test_multi_process_environment_and_torchrun_fields():
    args = launch_args("--cpu", "--num_processes", "2", "train.py")
    env = prepare_multi_gpu_env(args)
    assert (env["ACCEL_STRATEGY"], env["ACCEL_USE_CPU"], env["OMP_NUM_THREADS"]) == (
        "ddp",
        "true",
        "1",
    )
    assert args.nproc_per_node == "2"
    assert args.master_port == str(args.main_process_port)
    assert 1 <= args.main_process_port <= 65535
    printed = dry_run_environment("--cpu", "--num_processes", "2", "train.py")
    assert {key: env[key] for key in printed} == printed


def test_multi_machine_fields_like_accelerates():
    argv = ("--cpu", "--num_processes", "4", "--num_machines", "2", "--machine_rank", "1")
    argv += ("--main_process_ip", "10.0.0.1", "--main_process_port", "29555", "train.py")
    args = launch_args(*argv)
    prepare_multi_gpu_env(args)
    assert (args.nproc_per_node, args.nnodes, args.node_rank) == ("2", "2", 1)
    assert args.master_addr == "10.0.0.1" and args.master_port == "29555"  # same_network default


def test_a_busy_port_is_an_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        args = launch_args("--cpu", "--num_processes", "2", "--main_process_port", port, "t.py")
        with pytest.raises(AccelLaunchError, match="already in use"):
            prepare_multi_gpu_env(args)


def test_deepspeed_environment_carries_the_strategy_config():
    argv = ("--cpu", "--num_processes", "2", "--zero_stage", "3")
    argv += ("--offload_optimizer_device", "cpu", "train.py")
    args = launch_args(*argv)
    command, env = prepare_deepspeed_cmd_env(args)
    assert command is None  # processes start through torch's elastic agent
    assert env["ACCEL_STRATEGY"] == "deepspeed"
    assert json.loads(env["ACCEL_STRATEGY_CONFIG"]) == {
        "offload_optimizer_device": "cpu",
        "zero_stage": 3,
    }
    assert args.nproc_per_node == "2"


def test_deepspeeds_own_multi_machine_launchers_are_refused():
    args = launch_args(
        "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "10.0.0.1", "t.py"
    )
    args.deepspeed_multinode_launcher = "pdsh"
    with pytest.raises(AccelLaunchError, match="'pdsh' is not supported"):
        prepare_deepspeed_cmd_env(args)


def accelerate_namespace(**overrides: object) -> argparse.Namespace:
    """A namespace with the field names of Accelerate 1.15's launch parser."""
    fields: dict[str, object] = {
        "training_script": "train.py",
        "training_script_args": [],
        "module": False,
        "no_python": False,
        "cpu": True,
        "use_cpu": True,
        "debug": False,
        "num_processes": 1,
        "num_machines": 1,
        "mixed_precision": "no",
        "dynamo_backend": "NO",
        "gpu_ids": None,
        "mpirun_hostfile": None,
        "config_file": None,
    }
    fields.update(overrides)
    return argparse.Namespace(**fields)


def test_accelerates_namespace_is_read_and_checked():
    command, env = prepare_simple_launcher_cmd_env(accelerate_namespace(mixed_precision="fp16"))
    assert command == [sys.executable, "train.py"]
    assert env["ACCEL_MIXED_PRECISION"] == "fp16" and env["ACCEL_DYNAMO_BACKEND"] == "no"
    with pytest.raises(ValueError, match="Unknown mixed_precision mode: fp4"):
        prepare_simple_launcher_cmd_env(accelerate_namespace(mixed_precision="fp4"))
    with pytest.raises(AccelLaunchError, match="fp8 is out of scope"):
        prepare_simple_launcher_cmd_env(accelerate_namespace(mixed_precision="fp8"))
    with pytest.raises(ValueError, match="Unknown dynamo backend: WARP"):
        prepare_simple_launcher_cmd_env(accelerate_namespace(dynamo_backend="warp"))
    with pytest.raises(AccelLaunchError, match="no mpirun launcher"):
        prepare_simple_launcher_cmd_env(accelerate_namespace(mpirun_hostfile="hosts"))
    with pytest.raises(AccelLaunchError, match="Megatron-LM is out of scope"):
        prepare_multi_gpu_env(accelerate_namespace(use_megatron_lm=True))


def test_prepare_tpu():
    args = argparse.Namespace(mixed_precision="no", debug=True, tpu_vm=["vm"], tpu_name="pod-1")
    args, env = prepare_tpu(args, {"KEEP": "1"}, pod=True)
    assert env == {"KEEP": "1", "ACCEL_DEBUG_MODE": "true"}
    assert (args.vm, args.tpu) == (["vm"], "pod-1")


def test_parallelism_config_variables():
    args = argparse.Namespace(parallelism_config_dp_shard_size=4, parallelism_config_cp_size=2)
    env = prepare_extend_env_parallelism_config(args, {})
    assert env == {
        "ACCELERATE_USE_PARALLELISM_CONFIG": "true",
        "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "1",
        "PARALLELISM_CONFIG_DP_SHARD_SIZE": "4",
        "PARALLELISM_CONFIG_TP_SIZE": "1",
        "PARALLELISM_CONFIG_CP_SIZE": "2",
        "PARALLELISM_CONFIG_CP_BACKEND": "torch",
        "PARALLELISM_CONFIG_SP_SIZE": "1",
        "PARALLELISM_CONFIG_SP_BACKEND": "deepspeed",
        "PARALLELISM_CONFIG_CP_COMM_STRATEGY": "allgather",
        "PARALLELISM_CONFIG_PP_SIZE": "1",  # declared by the fsdp engine (accel-backends)
        "PARALLELISM_CONFIG_EP_SIZE": "1",  # the fsdp engine's too
    }


def test_env_var_path_add(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", "/a::/b")
    assert env_var_path_add("PYTHONPATH", Path("/c")) == "/a:/b:/c"
    assert os.environ["PYTHONPATH"] == "/a::/b"
    monkeypatch.delenv("PYTHONPATH")
    assert env_var_path_add("PYTHONPATH", "/c") == "/c"


def test_sagemaker_and_fp8_are_out_of_scope():
    with pytest.raises(AccelLaunchError, match="SageMaker launches are out of scope"):
        prepare_sagemager_args_inputs(object(), accelerate_namespace())
    with pytest.raises(AccelLaunchError, match=r"FP8 training .* is out of scope"):
        setup_fp8_env(accelerate_namespace(), {})
