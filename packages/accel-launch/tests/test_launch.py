"""``accel launch`` for real: 1, 2, 3 processes on gloo, two machines, failures, signals."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import SCRIPTS, accel_command, clean_env, run_accel

from accel_launch.launch.ports import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def reports(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]


def test_one_process_runs_in_place(tmp_path: Path):
    env = clean_env(OUT=str(tmp_path), ACCEL_MIXED_PRECISION="fp16")
    proc = subprocess.Popen(
        [*accel_command(), "launch", "--debug", str(SCRIPTS / "probe.py"), "a", "--b"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    (report,) = reports(tmp_path, 1)
    assert report["pid"] == proc.pid  # exec'd: no launcher process stays behind
    assert report["argv"] == ["a", "--b"] and report["name"] == "__main__"
    assert report["env"]["ACCEL_MIXED_PRECISION"] == "fp16"
    assert report["env"]["ACCEL_DEBUG_MODE"] == "true"
    assert "ACCEL_STRATEGY" not in report["env"] and "RANK" not in report["env"]


def test_three_processes_get_the_launch_environment(tmp_path: Path):
    done = run_accel(
        "launch",
        "--num_processes",
        "3",
        "--cpu",
        "--use_fsdp",
        "--fsdp_sharding_strategy",
        "SHARD_GRAD_OP",
        "--mixed-precision",
        "bf16",
        "--num_cpu_threads_per_process",
        "1",
        "--log-dir",
        str(tmp_path / "logs"),
        str(SCRIPTS / "probe.py"),
        "--epochs",
        "2",
        env=clean_env(OUT=str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    everyone = reports(tmp_path, 3)
    assert [r["gathered"] for r in everyone] == [[0, 1, 2]] * 3
    for rank, report in enumerate(everyone):
        env = report["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "3"
        assert env["GROUP_RANK"] == "0" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["ACCEL_STRATEGY"] == "fsdp"
        assert json.loads(env["ACCEL_STRATEGY_CONFIG"]) == {
            "fsdp_sharding_strategy": "SHARD_GRAD_OP"
        }
        assert env["ACCEL_MIXED_PRECISION"] == "bf16" and env["ACCEL_USE_CPU"] == "true"
        assert env["OMP_NUM_THREADS"] == "1" and env["ACCEL_NUM_MACHINES"] == "1"
        assert report["argv"] == ["--epochs", "2"] and report["name"] == "__main__"
    assert len({r["env"]["MASTER_PORT"] for r in everyone}) == 1
    if importlib.util.find_spec("accel_ops") is not None:  # the reader's side of the contract
        from accel_ops import LaunchEnvironment

        parsed = LaunchEnvironment.from_environ(everyone[2]["env"])
        assert (parsed.rank, parsed.world_size, parsed.local_world_size) == (2, 3, 3)
        assert (parsed.strategy, parsed.mixed_precision, parsed.use_cpu) == ("fsdp", "bf16", True)
        assert dict(parsed.strategy_config) == {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}
    # --log_dir keeps every worker's output even after success (the launcher's temp logs go away)
    logs = sorted((tmp_path / "logs").glob("*/attempt_0/*/output.log"))
    assert [log.read_text() for log in logs] == [f"probe rank {r} done\n" for r in range(3)]


def _start_machine(
    rank: int,
    port: int,
    out: Path,
    extra_env: dict[str, str],
    args: list[str],
    prefix: list[str] = (),
    total: int = 4,
) -> subprocess.Popen[str]:
    env = clean_env(OUT=str(out), PYTHONPATH=str(SCRIPTS), **extra_env)
    return subprocess.Popen(
        [
            *prefix,
            *accel_command(),
            "launch",
            "--cpu",
            "--num_processes",
            str(total),
            "--main_process_port",
            str(port),
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _check_two_machines(
    procs: list[subprocess.Popen[str]], out: Path, per_machine: int = 2
) -> list[dict]:
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    world = 2 * per_machine
    everyone = reports(out, world)
    assert [r["gathered"] for r in everyone] == [list(range(world))] * world
    assert [r["env"]["GROUP_RANK"] for r in everyone] == ["0"] * per_machine + ["1"] * per_machine
    assert [r["env"]["LOCAL_RANK"] for r in everyone] == [str(i) for i in range(per_machine)] * 2
    assert {r["env"]["WORLD_SIZE"] for r in everyone} == {str(world)}
    assert {r["env"]["ACCEL_NUM_MACHINES"] for r in everyone} == {"2"}
    return everyone


def test_two_machines_from_slurm_variables_over_loopback(tmp_path: Path):
    """``srun accel launch -m probe``: machines, rank and main address come from SLURM.

    One process per machine keeps this test short; the namespace test below runs two each.
    """
    port = free_port()
    procs = [
        _start_machine(
            node,
            port,
            tmp_path,
            {
                "SLURM_NNODES": "2",
                "SLURM_NODEID": str(node),
                "SLURM_PROCID": str(node),
                "SLURM_JOB_NODELIST": "127.0.0.[1-2]",
            },
            ["-m", "probe", "x"],
            total=2,
        )
        for node in (0, 1)
    ]
    everyone = _check_two_machines(procs, tmp_path, per_machine=1)
    assert {r["env"]["MASTER_ADDR"] for r in everyone} == {"127.0.0.1"}
    assert {r["name"] for r in everyone} == {"__main__"} and everyone[1]["argv"] == ["x"]


def _can_make_namespaces() -> bool:
    return (
        os.geteuid() == 0 and subprocess.run(["which", "ip"], capture_output=True).returncode == 0
    )


@pytest.fixture
def two_namespaces():
    """Two network namespaces joined by a veth pair: 10.213.0.1 and 10.213.0.2."""
    tag = str(os.getpid() % 10000)
    names = [f"accel{tag}a", f"accel{tag}b"]
    veth = [f"va{tag}", f"vb{tag}"]

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        for name in names:
            ip("netns", "add", name)
        ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for index, (name, dev) in enumerate(zip(names, veth, strict=True)):
            ip("link", "set", dev, "netns", name)
            ip("-n", name, "addr", "add", f"10.213.0.{index + 1}/24", "dev", dev)
            ip("-n", name, "link", "set", dev, "up")
            ip("-n", name, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {error}")
    yield list(zip(names, veth, strict=True))
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and iproute2 (ip netns)")
def test_two_machines_in_two_network_namespaces(tmp_path: Path, two_namespaces):
    port = free_port()
    procs = [
        _start_machine(
            rank,
            port,
            tmp_path,
            {"GLOO_SOCKET_IFNAME": dev},
            [
                "--num_machines",
                "2",
                "--machine_rank",
                str(rank),
                "--main_process_ip",
                "10.213.0.1",
                str(SCRIPTS / "probe.py"),
            ],
            prefix=["ip", "netns", "exec", name],
        )
        for rank, (name, dev) in enumerate(two_namespaces)
    ]
    everyone = _check_two_machines(procs, tmp_path)
    assert {r["env"]["MASTER_ADDR"] for r in everyone} == {"10.213.0.1"}


def test_a_failing_rank_stops_the_job_with_a_summary_first(tmp_path: Path):
    start = time.time()
    done = run_accel(
        "launch",
        "--num_processes",
        "2",
        "--log_dir",
        str(tmp_path / "logs"),
        str(SCRIPTS / "fail.py"),
        env=clean_env(OUT=str(tmp_path)),
        timeout=90,
    )
    ended = time.time()
    assert done.returncode == 1, done.stderr
    failed_at = float((tmp_path / "failed_at").read_text())
    assert ended - failed_at < 10, f"job stopped {ended - failed_at:.1f}s after the failure"
    sleeper = int((tmp_path / "sleeper0").read_text())
    assert (
        not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == psutil.STATUS_ZOMBIE
    )
    err = done.stderr
    summary = err.index("accel launch: the job failed on machine 0")
    assert summary < err.index("Root Cause")  # ours first, torch's report after
    block = err[summary : err.index("Root Cause")]
    assert "rank 1 (local rank 1" in block and "exited with code 1" in block
    assert "exception: ValueError: loss is nan at step 3" in block
    assert "| step 2 on rank 1" in block
    assert "rank 0 (local rank 0) was stopped by the agent" in block
    assert ended - start < 60


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_every_process(tmp_path: Path, sig: signal.Signals):
    proc = subprocess.Popen(
        [*accel_command(), "launch", "--num_processes", "2", str(SCRIPTS / "sleeper.py")],
        env=clean_env(OUT=str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    workers = [int((tmp_path / f"ready{r}").read_text()) for r in range(2)]
    family = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert set(workers) <= set(family)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {sig.name}" in err
    time.sleep(0.5)
    alive = [
        pid
        for pid in family
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == [], f"orphans left: {alive}"


def test_workers_stop_when_the_launcher_is_killed(tmp_path: Path):
    proc = subprocess.Popen(
        # a killed launcher can't delete its log folder: keep it in the test's folder
        [
            *accel_command(),
            "launch",
            "--num_processes",
            "2",
            "--log_dir",
            str(tmp_path / "logs"),
            str(SCRIPTS / "sleeper.py"),
        ],
        env=clean_env(OUT=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    workers = [psutil.Process(int((tmp_path / f"ready{r}").read_text())) for r in range(2)]
    proc.kill()  # SIGKILL: the launcher can't stop anything itself
    proc.wait(timeout=10)
    psutil.wait_procs(workers, timeout=5)
    alive = [p.pid for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"workers outlived their launcher: {alive}"
