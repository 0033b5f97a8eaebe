"""accel launch against accelerate launch and bare torchrun; accel --help against accelerate --help.

Every launcher starts 2 CPU processes that create their process state and exit:
- accel: ``accel launch --num_processes 2 launch_noop.py`` (accel_ops.PartialState when installed,
  else torch.distributed directly);
- Accelerate: ``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2
  launch_noop_hf.py`` (Accelerate's PartialState);
- raw: ``torchrun --nproc_per_node 2 launch_noop_raw.py`` (init_process_group on gloo).
A second accel row runs the raw script, so that launcher overhead alone is compared with torchrun.
"""

from __future__ import annotations

from pathlib import Path

from harness import HERE, Context, Row, time_command

TITLE = "Launcher: start 2 CPU processes that create their process state (wall seconds)"
WORKLOADS = HERE / "workloads"


def _bin(python: str, name: str) -> str:
    return str(Path(python).parent / name)


def run(ctx: Context) -> list[Row]:
    repeats = 2 if ctx.quick else 5
    noop = str(WORKLOADS / "launch_noop.py")
    noop_raw = str(WORKLOADS / "launch_noop_raw.py")
    accel = [_bin(ctx.python, "accel"), "launch", "--quiet", "--num_processes", "2"]
    torchrun = [_bin(ctx.python, "torchrun"), "--nproc_per_node", "2", noop_raw]
    raw = time_command(torchrun, repeats)
    ours = time_command([*accel, noop], repeats)
    ours_raw_script = time_command([*accel, noop_raw], repeats)
    hf = None
    hf_help = None
    if ctx.hf_python:
        accelerate = _bin(ctx.hf_python, "accelerate")
        hf_cmd = [
            accelerate,
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            str(WORKLOADS / "launch_noop_hf.py"),
        ]
        hf = time_command(hf_cmd, repeats, env={"ACCELERATE_USE_CPU": "1"})
        hf_help = time_command([accelerate, "--help"], repeats)
    help_time = time_command([_bin(ctx.python, "accel"), "--help"], repeats)
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
