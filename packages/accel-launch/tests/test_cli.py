"""The real ``accel`` command in subprocesses: help, config subcommands, env, dry run, errors."""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import FIXTURES, accel_command, clean_env, run_accel

from accel_launch.docgen import generate

REPO = Path(__file__).resolve().parents[3]

_NO_TORCH = """
import sys
from accel_launch.cli import main
for argv in {argvs!r}:
    try:
        main(argv)
    except SystemExit:
        pass
print("TORCH_IMPORTED", "torch" in sys.modules)
"""


def test_help_config_and_dry_run_do_not_import_torch(tmp_path: Path):
    config = tmp_path / "c.yaml"
    argvs = [
        ["--help"],
        ["launch", "--help"],
        ["config", "default", "--config_file", str(config)],
        ["config", "show", "--config_file", str(config)],
        ["config", "update", "--config_file", str(config)],
        ["launch", "--dry-run", "--num_processes", "2", "--config_file", str(config), "x.py"],
    ]
    done = subprocess.run(
        [sys.executable, "-c", _NO_TORCH.format(argvs=argvs)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert "TORCH_IMPORTED False" in done.stdout, done.stdout + done.stderr
    assert config.is_file()


def test_help_lists_commands_and_groups():
    top = run_accel("--help")
    assert top.returncode == 0
    for command in ("config", "launch", "test", "env", "estimate-memory", "merge-weights"):
        assert command in top.stdout
    launch = run_accel("launch", "--help")
    for group in ("Hardware", "Resources", "Distributed", "DeepSpeed", "FSDP", "XLA"):
        assert group in launch.stdout
    assert "--fsdp_sharding_strategy" in launch.stdout and "--num-processes" in launch.stdout


def test_config_default_show_update_through_the_command(tmp_path: Path):
    xdg = tmp_path / "xdg"
    env = clean_env(XDG_CONFIG_HOME=str(xdg))
    done = run_accel("config", "default", "--mixed_precision", "fp16", env=env)
    assert done.returncode == 0, done.stderr
    path = xdg / "accel" / "default_config.yaml"
    assert str(path) in done.stdout
    written = yaml.safe_load(path.read_text())
    assert written["mixed_precision"] == "fp16"
    again = run_accel("config", "default", env=env)
    assert again.returncode == 1 and "already exists" in again.stdout
    shown = run_accel("config", "show", env=env)
    assert shown.returncode == 0 and "mixed_precision: fp16" in shown.stdout
    explicit = tmp_path / "elsewhere.yaml"
    explicit.write_text((FIXTURES / "fsdp_v1_old.yaml").read_text())
    updated = run_accel("config", "update", "--config_file", str(explicit), env=env)
    assert updated.returncode == 0, updated.stderr
    assert "fsdp_backward_prefetch: BACKWARD_PRE" in explicit.read_text()


def test_bad_config_file_is_a_one_line_error(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_typ: NO\n")
    done = run_accel("launch", "--config_file", str(bad), "x.py")
    assert done.returncode == 2
    assert "unknown key 'distributed_typ'" in done.stderr
    assert "Did you mean 'distributed_type'" in done.stderr
    assert "Traceback" not in done.stderr


def test_env_reports_versions_and_config(tmp_path: Path):
    done = run_accel("env", "--config_file", str(FIXTURES / "multi_cpu.yaml"))
    assert done.returncode == 0, done.stderr
    assert f"Python: {sys.version.split()[0]}" in done.stdout
    assert f"accel-launch: {importlib.metadata.version('accel-launch')}" in done.stdout
    assert "RAM:" in done.stdout and "torch:" in done.stdout
    assert "distributed_type: MULTI_CPU" in done.stdout


def test_dry_run_shows_sources_and_worker_environment(tmp_path: Path):
    env = clean_env(ACCEL_MIXED_PRECISION="bf16", XDG_CONFIG_HOME=str(tmp_path))
    done = run_accel(
        "launch",
        "--dry-run",
        "--config_file",
        str(FIXTURES / "multi_cpu.yaml"),
        "--use_fsdp",
        "--fsdp_offload_params",
        "true",
        "train.py",
        "--lr",
        "1",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert lines["num_processes"].split()[1:3] == ["3", "config"]
    assert lines["mixed_precision"].split()[1:] == ["bf16", "env", "ACCEL_MIXED_PRECISION"]
    assert lines["rdzv_backend"].split()[1:] == [
        "static",
        "config",
        "file",
        str(FIXTURES / "multi_cpu.yaml"),
    ]
    assert lines["max_restarts"].split()[1:] == ["0", "default"]
    assert lines["distributed_type"].split()[1:] == ["FSDP", "flag"]
    assert "  ACCEL_STRATEGY=fsdp" in out
    assert '  ACCEL_STRATEGY_CONFIG={"fsdp_offload_params": true}' in out
    assert "  ACCEL_MIXED_PRECISION=bf16" in out
    assert "  WORLD_SIZE=3" in out
    assert "train.py --lr 1" in out


def test_busy_main_process_port_is_a_clear_error():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run_accel("launch", "--num_processes", "2", "--main_process_port", str(port), "x.py")
    assert done.returncode == 2
    assert f"--main_process_port {port} (flag) is already in use" in done.stderr


def test_main_process_port_0_picks_a_free_port_as_in_accelerate():
    done = run_accel(
        "launch", "--num_processes", "2", "--main_process_port", "0", "--dry-run", "x.py"
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if "MASTER_PORT" in line]
    port = int(line.split("MASTER_PORT", 1)[1].strip(" =:").split()[0])
    assert 1 <= port <= 65535
    several = run_accel(
        "launch",
        "--num_machines",
        "2",
        "--num_processes",
        "4",
        "--machine_rank",
        "0",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        "0",
        "--dry-run",
        "x.py",
    )
    assert several.returncode == 2
    assert "--main_process_port 0 (flag) picks a free port on one machine only" in several.stderr


def test_committed_cli_reference_is_generated():
    committed = (REPO / "docs" / "reference" / "cli.md").read_text()
    assert committed == generate(), (
        "regenerate: python -m accel_launch.docgen > docs/reference/cli.md"
    )


def test_accel_command_is_installed():
    assert accel_command()[0].endswith("accel")
