"""``save_state(async_save=True)`` under FSDP2 on 2 CPU processes (gloo): how long the training
loop is blocked, against the synchronous ``save_state`` of the same ~500 MB sharded state.

The workload (benchmarks/workloads/fsdp_async_save.py) builds the checkpoint benchmark's state (a
42M-parameter float32 MLP, 168 MB, and AdamW after one step, 336 MB) sharded by FSDP2 over the 2
processes. accel's asynchronous save blocks for the CPU copy of this process's shards (into the
copies of the previous save, after the first) and writes them with torch.distributed.checkpoint
in a background thread over a gloo group of its own. The raw column does the same by hand with
torch's own ``dcp.save`` and ``dcp.async_save`` (given a gloo group of its own too). Medians over
several calls after a warm-up; the warm-up's blocked time (the first asynchronous save, which
allocates the copies) is a row of its own. Accelerate has no asynchronous ``save_state``: n/a.
"""

from __future__ import annotations

import shutil
import sys

from harness import HERE, Context, Row, json_result

TITLE = (
    "Asynchronous save_state, FSDP2 (sharded), 2 CPU processes, gloo, 504 MB model + AdamW state"
    " (seconds per call)"
)
WORKLOAD = str(HERE / "workloads" / "fsdp_async_save.py")
TARGET = 0.15


def run(ctx: Context) -> list[Row]:
    repeats = 2 if ctx.quick else 5
    folder = ctx.scratch / "async_save"
    shutil.rmtree(folder, ignore_errors=True)
    command = [
        ctx.python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        WORKLOAD,
        str(repeats),
        str(folder),
    ]
    result = json_result(command, timeout=900)
    print(f"async_save: {result}", file=sys.stderr)
    accel, raw = result["accel"], result["raw"]
    sync, blocked = accel["sync"], accel["async_blocked"]
    size = result["bytes"] / 1e6
    return [
        Row(f"save_state, {size:.0f} MB checkpoint (synchronous)", "s", sync, None, raw["sync"]),
        Row(
            "save_state(async_save=True): time the loop is blocked (the call)",
            "s",
            blocked,
            None,
            raw["async_blocked"],
            f"<= {TARGET}x the synchronous save ({TARGET * sync:.3g} s)",
            blocked <= TARGET * sync,
        ),
        Row(
            "first save_state(async_save=True), which allocates the CPU copies: blocked",
            "s",
            accel["first_async_blocked"],
            None,
            raw["first_async_blocked"],
            "(reported)",
            None,
        ),
        Row(
            "save_state(async_save=True): until wait_for_checkpoint() returns",
            "s",
            accel["async_total"],
            None,
            raw["async_total"],
            f"(synchronous save: {sync:.3g} s)",
            None,
        ),
    ]
