"""Accelerate's ``launch_command_parser`` and ``launch_command`` (what trl's CLI calls), and
``accel launch --as-accelerate``: real launches on 1 and 2 processes from this process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import SCRIPTS, clean_env, run_accel

from accel_launch.commands.launch_cmd import launch_command, launch_command_parser

PROBE = str(SCRIPTS / "probe.py")
EXIT_WITH = str(SCRIPTS / "exit_with.py")

#: An Accelerate config file as trl ships them (trl/accelerate_configs/multi_gpu.yaml), on CPU.
TRL_STYLE_CONFIG = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""


@pytest.fixture
def launch_env(config_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's environment as a clean launcher's (no ACCEL_*, SLURM_*, ranks); OUT set."""
    for name in list(os.environ):
        if name.startswith(("ACCEL_", "SLURM_", "LOCAL_", "MASTER_")) or name in (
            "RANK",
            "WORLD_SIZE",
            "GROUP_RANK",
        ):
            monkeypatch.delenv(name)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return out


def _report(out: Path, rank: int) -> dict:
    return json.loads((out / f"rank{rank}.json").read_text())


def test_parser_takes_trl_launch_flags_then_the_script_and_its_arguments(tmp_path: Path):
    config = tmp_path / "multi.yaml"
    config.write_text(TRL_STYLE_CONFIG)
    launch_args = [
        *("--config_file", str(config)),
        *("--num_processes", "2"),
        *("--num_machines", "1", "--machine_rank", "0"),
        *("--mixed_precision", "bf16"),
        *("--main_process_port", "29611"),
        *("--gradient_accumulation_steps", "4"),
        *("--dynamo_backend", "no"),
        "--use_deepspeed",
        *("--zero_stage", "2"),
        "--quiet",
    ]
    script_args = ["--model_name_or_path", "Qwen/Qwen2-0.5B", "--num_processes", "9", "-m"]
    args = launch_command_parser().parse_args([*launch_args, "sft.py", *script_args])
    assert args.config_file == str(config)
    assert (args.num_processes, args.num_machines, args.machine_rank) == (2, 1, 0)
    assert (args.mixed_precision, args.main_process_port) == ("bf16", 29611)
    assert (args.gradient_accumulation_steps, args.dynamo_backend) == (4, "no")
    assert (args.use_deepspeed, args.zero_stage, args.quiet) == (True, 2, True)
    assert args.training_script == "sft.py"
    assert args.training_script_args == script_args  # the script's own flags stay the script's
    assert args.module is False and args.as_accelerate is None
    assert args.func is launch_command


def test_parser_on_subparsers_registers_launch():
    import argparse

    commands = argparse.ArgumentParser(prog="tool").add_subparsers(dest="command")
    parser = launch_command_parser(commands)
    args = parser.parse_args(["--num-processes", "3", "--as-accelerate", "train.py"])
    assert (args.num_processes, args.as_accelerate, args.func) == (3, True, launch_command)


def test_one_process_runs_as_a_child_and_returns(launch_env: Path):
    args = launch_command_parser().parse_args(["--cpu", PROBE, "x", "--y"])
    assert launch_command(args) is None
    report = _report(launch_env, 0)
    assert report["pid"] != os.getpid()  # a child, not this process exec'd
    assert report["argv"] == ["x", "--y"]
    assert report["env"]["ACCEL_USE_CPU"] == "true"
    assert "ACCEL_AS_ACCELERATE" not in report["env"] and "RANK" not in report["env"]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes_return_and_leave_the_caller_as_it_was(launch_env: Path):
    environ = dict(os.environ)
    sigint = signal.getsignal(signal.SIGINT)
    args = launch_command_parser().parse_args(
        ["--cpu", "--num_processes", "2", "--as_accelerate", PROBE]
    )
    assert launch_command(args) is None
    reports = [_report(launch_env, rank) for rank in (0, 1)]
    assert [r["env"]["RANK"] for r in reports] == ["0", "1"]
    assert [r["gathered"] for r in reports] == [[0, 1], [0, 1]]
    for report in reports:
        assert report["env"]["ACCEL_AS_ACCELERATE"] == "1"
        assert report["env"]["ACCEL_AS_ACCELERATE_ORIGIN"] == "accel launch --as-accelerate"
    assert dict(os.environ) == environ  # no worker variable left behind
    assert signal.getsignal(signal.SIGINT) is sigint  # the elastic agent's handler is gone


def test_a_failing_process_raises_called_process_error_with_its_code(launch_env: Path):
    args = launch_command_parser().parse_args(["--cpu", EXIT_WITH, "3"])
    with pytest.raises(subprocess.CalledProcessError) as failed:
        launch_command(args)
    assert failed.value.returncode == 3
    assert failed.value.cmd == [sys.executable, EXIT_WITH, "3"]


def test_a_failing_process_with_quiet_raises_system_exit_with_its_code(launch_env: Path):
    args = launch_command_parser().parse_args(["--cpu", "--quiet", EXIT_WITH, "4"])
    with pytest.raises(SystemExit) as failed:
        launch_command(args)
    assert failed.value.code == 4


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_failing_job_of_two_processes_raises_with_its_code(launch_env: Path):
    args = launch_command_parser().parse_args(
        ["--cpu", "--num_processes", "2", "--log_dir", str(launch_env / "logs"), EXIT_WITH, "5"]
    )
    with pytest.raises(subprocess.CalledProcessError) as failed:
        launch_command(args)
    assert failed.value.returncode == 5
    assert failed.value.cmd[-2:] == [EXIT_WITH, "5"]


def test_workers_of_a_caller_with_the_alias_on_get_it_with_its_origin(
    launch_env: Path, monkeypatch: pytest.MonkeyPatch
):
    hook = types.ModuleType("accel.as_accelerate")
    hook.active_origin = lambda: "a test's hook"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "accel.as_accelerate", hook)
    assert launch_command(launch_command_parser().parse_args(["--cpu", PROBE])) is None
    env = _report(launch_env, 0)["env"]
    assert env["ACCEL_AS_ACCELERATE"] == "1"
    assert env["ACCEL_AS_ACCELERATE_ORIGIN"] == "a test's hook"


def test_dry_run_prints_and_starts_nothing(launch_env: Path, capsys: pytest.CaptureFixture[str]):
    args = launch_command_parser().parse_args(["--dry-run", "--cpu", PROBE])
    assert launch_command(args) is None
    assert "accel launch --dry-run: nothing was started." in capsys.readouterr().out
    assert not list(launch_env.iterdir())


def test_dry_run_shows_the_as_accelerate_variables(tmp_path: Path):
    done = run_accel(
        "launch",
        "--dry-run",
        "--as-accelerate",
        "train.py",
        env=clean_env(XDG_CONFIG_HOME=str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert ["as_accelerate", "True", "flag"] in lines
    assert "  ACCEL_AS_ACCELERATE=1" in done.stdout.splitlines()
    assert "  ACCEL_AS_ACCELERATE_ORIGIN=accel launch --as-accelerate" in done.stdout.splitlines()
    plain = run_accel(
        "launch", "--dry-run", "train.py", env=clean_env(XDG_CONFIG_HOME=str(tmp_path))
    )
    assert "ACCEL_AS_ACCELERATE" not in plain.stdout
    assert ["as_accelerate", "False", "default"] in [
        line.split() for line in plain.stdout.splitlines()
    ]


def test_accel_launch_as_accelerate_reaches_the_worker(tmp_path: Path):
    env = clean_env(OUT=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    done = run_accel("launch", "--as-accelerate", "--cpu", PROBE, env=env)
    assert done.returncode == 0, done.stderr
    report = _report(tmp_path, 0)["env"]
    assert report["ACCEL_AS_ACCELERATE"] == "1"
    assert report["ACCEL_AS_ACCELERATE_ORIGIN"] == "accel launch --as-accelerate"
