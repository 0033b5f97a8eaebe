"""Faults on 2 CPU processes (gloo): preemption of a ~500 MB model, a lost machine, and the
per-step cost of listening for the preemption signal; accel against Hugging Face Accelerate and
a hand-written torch DDP loop (``benchmarks/workloads/faults_job.py``).

- **Preemption**: an MLP of 8 layers of 3950 (499 MB of float32 weights) with AdamW trains on 2
  processes; after a periodic ``save_state()`` at step 2 (timed: "plain save_state"), rank 0
  sends SIGTERM to its launcher at step 4. "signal -> launcher exit" runs from that moment to the
  launcher's exit; "steps lost" is the last step trained minus the step of the newest checkpoint
  (accel saves on the signal; Accelerate has only the periodic one).
- **Lost machine**: two accel launchers on loopback (one process each, c10d), saving every 10
  steps; machine 1's process SIGKILLs its own launcher at step 25; a replacement launcher starts
  at once (or, with ``--num_machines 1:2``, none does). Measured: from the SIGKILL to the first
  step of the resumed group.
- **Listening cost**: a small MLP (2 layers of 256, batch 16: a few milliseconds a step, where a
  per-step cost shows most) for 1500 steps; median step time after the first 100, accel with the
  preemption watch on (a project folder) and off (``ACCEL_PREEMPTION_SIGNAL=none``) and raw torch
  DDP, launches interleaved, medians of 3 launches each.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import HERE, Context, Row

TITLE = "Faults, 2 CPU processes, gloo (preemption of a 499 MB model, a lost machine, listening)"
JOB = str(HERE / "workloads" / "faults_job.py")
HF_ENV = {"ACCELERATE_USE_CPU": "1"}  # with --multi_gpu: MULTI_CPU, 2 processes


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "TORCHELASTIC_"))}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _accel(python: str) -> str:
    return str(Path(python).parent / "accel")


def _command(ctx: Context, impl: str, folder: Path, *job: str) -> list[str]:
    if impl == "accel":
        launcher = [_accel(ctx.python), "launch", "--quiet", "--cpu", "--num_processes", "2"]
        return [*launcher, JOB, impl, str(folder), *job]
    if impl == "raw":
        torchrun = [ctx.python, "-m", "torch.distributed.run", "--standalone"]
        return [*torchrun, "--nproc_per_node=2", JOB, impl, str(folder), *job]
    assert ctx.hf_python is not None
    accelerate = str(Path(ctx.hf_python).parent / "accelerate")
    # LAUNCHER_PID: the job signals Accelerate's launcher (exec keeps the shell's pid)
    # --multi_gpu with ACCELERATE_USE_CPU=1: 2 CPU processes under torch's agent (--cpu starts one)
    inner = f"LAUNCHER_PID=$$ exec {accelerate} launch --multi_gpu --num_processes 2 " + " ".join(
        [JOB, impl, str(folder), *job]
    )
    return ["sh", "-c", inner]


def _run(command: list[str], **env: str) -> tuple[int, str, float]:
    done = subprocess.run(
        command, env=_env(**env), capture_output=True, text=True, timeout=900, check=False
    )
    return done.returncode, done.stderr, time.time()


def _steps(folder: Path, rank: int = 0) -> list[tuple[int, str, float]]:
    rows = []
    for line in (folder / f"steps_{rank}.log").read_text().splitlines():
        step, attempt, stamp = line.split()
        rows.append((int(step), attempt, float(stamp)))
    return rows


def _step_time(folder: Path) -> float:
    stamps = [stamp for _, _, stamp in _steps(folder)][100:]
    return statistics.median(b - a for a, b in itertools.pairwise(stamps))


def _listening(ctx: Context) -> list[Row]:
    job = ("--hidden", "256", "--layers", "2", "--batch", "16", "--steps", "1500")
    cases = {"on": ("accel", {}), "off": ("accel", {"ACCEL_PREEMPTION_SIGNAL": "none"})}
    cases["raw"] = ("raw", {})
    times: dict[str, list[float]] = {name: [] for name in cases}
    for launch in range(2 if ctx.quick else 3):
        for name, (impl, env) in cases.items():
            folder = ctx.scratch / f"listen-{name}-{launch}"
            code, err, _ = _run(_command(ctx, impl, folder, *job), **env)
            if code != 0:
                raise RuntimeError(f"{name}: exit {code}\n{err[-2000:]}")
            times[name].append(_step_time(folder))
            shutil.rmtree(folder, ignore_errors=True)
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    print(f"listening: step ms per launch {times}", file=sys.stderr)
    cost = median["on"] / median["off"]
    return [
        Row(
            "step time, preemption watch on",
            "ms",
            median["on"],
            None,  # Accelerate's column: see benchmarks/faults_vs_accelerate.py
            median["raw"],
        ),
        Row(
            "step time, preemption watch off",
            "ms",
            median["off"],
            None,  # Accelerate's column: see benchmarks/faults_vs_accelerate.py
            median["raw"],
        ),
        Row(
            "listening cost: step time on / off", "ratio", cost, target="<= 1.01", met=cost <= 1.01
        ),
    ]


def _preemption(ctx: Context) -> list[Row]:
    job = ("--hidden", "3950", "--layers", "8", "--batch", "4", "--steps", "8")
    job += ("--save-at", "2", "--signal-at", "4")
    results: dict[str, tuple[float, float, int]] = {}
    for impl in ["accel", "accelerate"] if ctx.hf_python else ["accel"]:
        folder = ctx.scratch / f"preempt-{impl}"
        code, err, ended = _run(
            _command(ctx, impl, folder, *job), **(HF_ENV if impl != "accel" else {})
        )
        signalled = float((folder / "signal_time").read_text())
        save = float((folder / "save_seconds").read_text())
        last = _steps(folder)[-1][0]
        if impl == "accel":
            if code != 75:
                raise RuntimeError(f"accel preemption: exit {code}\n{err[-2000:]}")
            saved = int(err.split("after batch ")[1].split(" ")[0])
        else:
            saved = 2  # the periodic checkpoint; SIGTERM saves nothing
        print(f"preemption {impl}: exit {code}, last step {last}, saved {saved}", file=sys.stderr)
        results[impl] = (ended - signalled, save, last - saved)
        shutil.rmtree(folder, ignore_errors=True)
    ours, theirs = results["accel"], results.get("accelerate")
    return [
        Row(
            "preemption: signal -> launcher exit (checkpoint saved)",
            "s",
            ours[0],
            theirs[0] if theirs else None,
        ),
        Row("plain save_state of the same state", "s", ours[1], theirs[1] if theirs else None),
        Row(
            "preemption: steps lost",
            "steps",
            ours[2],
            theirs[2] if theirs else None,
            target="0",
            met=ours[2] == 0,
        ),
    ]


def _lost_machine(ctx: Context, machines: str, replace: bool) -> float:
    from accel_launch.launch.ports import free_port

    folder = ctx.scratch / f"lost-{machines.replace(':', '-')}"
    launch = [_accel(ctx.python), "launch", "--quiet", "--cpu", "--num_machines", machines]
    launch += ["--num_processes", "2", "--rdzv_backend", "c10d", "--max_restarts", "3"]
    launch += ["--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]
    launch += ["--rdzv_conf", "last_call_timeout=2"]
    job = [JOB, "accel", str(folder), "--steps", "60", "--save-every", "10", "--resume"]
    job += ["--kill-launcher-at", "25"]

    def machine(rank: int, lose: bool = False) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*launch, "--machine_rank", str(rank), *job],
            env=_env(**({"LOSE_THIS_MACHINE": "1"} if lose else {})),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    main = machine(0)
    machine(1, lose=True).wait(timeout=300)
    if replace:
        machine(1).wait(timeout=300)
    if main.wait(timeout=300) != 0:
        raise RuntimeError(f"lost machine {machines}: machine 0 exited {main.returncode}")
    lost = float((folder / "lost_time").read_text())
    resumed = [stamp for _, attempt, stamp in _steps(folder) if attempt != "0"]
    shutil.rmtree(folder, ignore_errors=True)
    return resumed[0] - lost


def run(ctx: Context) -> list[Row]:
    rows = _listening(ctx)
    rows += _preemption(ctx)
    rows.append(
        Row(
            "lost machine -> first step after resume, replaced",
            "s",
            _lost_machine(ctx, "2", replace=True),
        )
    )
    rows.append(
        Row(
            "lost machine -> first step after resume, 1:2 (left behind)",
            "s",
            _lost_machine(ctx, "1:2", replace=False),
        )
    )
    return rows
