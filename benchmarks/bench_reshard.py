"""Resharding load on CPU processes (gloo): an FSDP2 checkpoint written by 4 processes loaded on 2,
accel's ``load_state`` against torch.distributed.checkpoint by hand.

The state (benchmarks/workloads/reshard_load.py): 8 residual Linear(1024, 1024) blocks (8.4M
float32 parameters, 34 MB) sharded by FSDP2, and AdamW after one step (67 MB of moments), saved
with ``save_state`` (``SHARDED_STATE_DICT``: ``pytorch_model_fsdp_0/`` and ``optimizer_0/``) by 4
processes. The raw column loads those two folders by hand: ``dcp.load`` into the sharded templates
of ``get_model_state_dict`` / ``get_optimizer_state_dict``, then ``set_model_state_dict`` /
``set_optimizer_state_dict``; accel's adds the manifest's size and checksum checks and the other
files of a checkpoint (RNG states). Each launch measures one implementation (so each process's
peak RSS is its own); launches alternate (accel, raw, accel, raw) and each figure is the median
over its launches of the launch's median load (the slowest process's time after a barrier).
Hugging Face Accelerate is not run: its load of an FSDP2 checkpoint is the same DCP calls.
"""

from __future__ import annotations

import shutil
import statistics
import sys

from harness import HERE, Context, Row, json_result, run_command

TITLE = "Resharding load, FSDP2 checkpoint of 4 CPU processes loaded on 2, gloo (seconds per call)"
WORKLOAD = str(HERE / "workloads" / "reshard_load.py")


def _torchrun(python: str, processes: int) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]


def run(ctx: Context) -> list[Row]:
    repeats, launches = (3, 1) if ctx.quick else (7, 2)
    folder = ctx.scratch / "fsdp4"
    shutil.rmtree(folder, ignore_errors=True)
    run_command([*_torchrun(ctx.python, 4), WORKLOAD, "save", str(folder)], timeout=600)
    found: dict[str, list[dict]] = {"accel": [], "raw": []}
    for _ in range(launches):
        for impl in ("accel", "raw"):
            command = [*_torchrun(ctx.python, 2), WORKLOAD, impl, str(repeats), str(folder)]
            found[impl].append(json_result(command, timeout=600))
    print(f"reshard: launches {found}", file=sys.stderr)
    accel = statistics.median(r["load"] for r in found["accel"])
    raw = statistics.median(r["load"] for r in found["raw"])
    first = found["accel"][0]
    rss = {
        impl: [statistics.median(r["peak_rss_mb"][i] for r in runs) for i in range(2)]
        for impl, runs in found.items()
    }
    return [
        Row(
            f"load_state, 4 -> 2 processes ({first['state_mb']:.0f} MB of weights + AdamW state)",
            "s",
            accel,
            None,
            raw,
            "<= 1.05x raw",
            accel <= 1.05 * raw,
        ),
        Row("peak RSS, rank 0", "MB", rss["accel"][0], None, rss["raw"][0], "(reported)", None),
        Row("peak RSS, rank 1", "MB", rss["accel"][1], None, rss["raw"][1], "(reported)", None),
        Row(
            "for reference: fp32 weights / per-rank share on 2 processes",
            "MB",
            first["model_mb"],
            None,
            first["model_mb"] / first["world"],
            "(reported: raw column = per-rank share)",
            None,
        ),
    ]
