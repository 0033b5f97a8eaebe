"""accel launch against accelerate launch and bare torchrun; accel --help against accelerate --help.

Every launcher starts 2 CPU processes that create their process state and exit:
- accel: ``accel launch --num_processes 2 launch_noop.py`` (accel_ops.PartialState when installed,
  else torch.distributed directly);
- Accelerate: ``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2
  launch_noop_hf.py`` (Accelerate's PartialState);
- raw: ``torchrun --nproc_per_node 2 launch_noop_raw.py`` (init_process_group on gloo).
A second accel row runs the raw script, so that launcher overhead alone is compared with torchrun.
The commands are timed in turns (one run of each, repeated), so that a machine whose load drifts
does not favour whichever command happens to run last.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from harness import HERE, Context, Row, run_command

TITLE = "Launcher: start 2 CPU processes that create their process state (wall seconds)"
WORKLOADS = HERE / "workloads"


def _bin(python: str, name: str) -> str:
    return str(Path(python).parent / name)


def _interleaved(
    commands: dict[str, tuple[list[str], dict[str, str] | None]], repeats: int
) -> dict:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, (command, env) in commands.items():
            start = time.perf_counter()
            run_command(command, env)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def run(ctx: Context) -> list[Row]:
    repeats = 2 if ctx.quick else 5
    noop = str(WORKLOADS / "launch_noop.py")
    noop_raw = str(WORKLOADS / "launch_noop_raw.py")
    accel = [_bin(ctx.python, "accel"), "launch", "--quiet", "--num_processes", "2"]
    torchrun = [_bin(ctx.python, "torchrun"), "--nproc_per_node", "2", noop_raw]
    commands = {
        "raw": (torchrun, None),
        "ours": ([*accel, noop], None),
        "ours_raw_script": ([*accel, noop_raw], None),
        "help": ([_bin(ctx.python, "accel"), "--help"], None),
    }
    if ctx.hf_python:
        accelerate = _bin(ctx.hf_python, "accelerate")
        hf_script = str(WORKLOADS / "launch_noop_hf.py")
        hf_cmd = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", hf_script]
        commands["hf"] = (hf_cmd, {"ACCELERATE_USE_CPU": "1"})
        commands["hf_help"] = ([accelerate, "--help"], None)
    times = _interleaved(commands, repeats)
    raw, ours, ours_raw_script = times["raw"], times["ours"], times["ours_raw_script"]
    hf, hf_help, help_time = times.get("hf"), times.get("hf_help"), times["help"]
    return [
        Row(
            "launch 2 processes, no-op job (PartialState)",
            "s",
            ours,
            hf,
            raw,
            "<= torchrun",
            ours <= raw,
        ),
        Row(
            "launch 2 processes, same script as torchrun",
            "s",
            ours_raw_script,
            None,
            raw,
            "<= torchrun",
            ours_raw_script <= raw,
        ),
        Row(
            "accel --help",
            "s",
            help_time,
            hf_help,
            None,
            "<= 0.1x Accelerate",
            None if hf_help is None else help_time <= 0.1 * hf_help,
        ),
    ]
