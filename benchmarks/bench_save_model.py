"""Saving a model as sharded safetensors: accel's ``save_model``, Hugging Face Accelerate's
``Accelerator.save_model``, and raw ``safetensors.torch.save_file`` of the same shards.

A 1.07 GB float32 model (64 Linear 2048x2048 layers; 67 MB with --quick) is saved into 200 MB
shards (20 MB) by each implementation in a fresh process (workloads/save_model_run.py). The three
take turns in a rotating order, 7 rounds (2 with --quick); each figure is the median over the
rounds. "fresh" saves into a new folder; "overwrite" saves again into the folder holding a save:
accel writes temporary files, renames them over the old ones and removes stale files (so the old
save stays whole until the new one is), while Accelerate and raw truncate the old files and write
over them. Dirty pages are flushed before every timed save, and a save of the same size is deleted
after that flush, just before the fresh one (see the workload: in this VM, page cache grown into
memory not used recently costs 10x what it costs in memory just freed, which measured the VM, not
the library).
Wall time includes waiting for the disk when the kernel throttles writers (on a shared disk the
same write took 0.2 to 3.3 s); the CPU time of the process (user + system) is the work the save
itself did.
"""

from __future__ import annotations

import statistics

from harness import HERE, Context, Row, json_result

TITLE = "Saving a model: save_model into sharded safetensors, 1 process (seconds)"
WORKLOAD = str(HERE / "workloads" / "save_model_run.py")
MB = 2**20
TARGET = "<= 1.1x raw and <= Accelerate"


def _run(ctx: Context, python: str, impl: str) -> dict:
    size = "quick" if ctx.quick else "full"
    folder = str(ctx.scratch / impl)
    return json_result([python, WORKLOAD, impl, folder, size], timeout=900)


def _median(results: list[dict]) -> dict:
    keys = ("fresh_s", "overwrite_s", "fresh_cpu_s", "overwrite_cpu_s", "rss_growth")
    return {**results[0], **{k: statistics.median(r[k] for r in results) for k in keys}}


def run(ctx: Context) -> list[Row]:
    impls = {"accel": ctx.python, "raw": ctx.python}
    if ctx.hf_python:
        impls["accelerate"] = ctx.hf_python
    runs: dict[str, list[dict]] = {impl: [] for impl in impls}
    order = list(impls)
    for round_ in range(2 if ctx.quick else 7):  # take turns, each first in some rounds
        for impl in order[round_ % len(order) :] + order[: round_ % len(order)]:
            runs[impl].append(_run(ctx, impls[impl], impl))
    ours, raw = _median(runs["accel"]), _median(runs["raw"])
    hf = _median(runs["accelerate"]) if ctx.hf_python else None
    if ours["files"] != raw["files"] or ours["bytes"] != raw["bytes"]:
        raise RuntimeError(f"accel and raw wrote different files: {ours} {raw}")
    shards = len(ours["files"]) - 1
    size = f"{ours['bytes'] / 10**9:.2f} GB in {shards} shards"

    def get(result: dict | None, key: str, scale: float = 1.0) -> float | None:
        return None if result is None else result[key] / scale

    def row(measure: str, key: str) -> Row:
        target = ours[key] <= 1.1 * raw[key] and (hf is None or ours[key] <= hf[key])
        return Row(measure, "s", ours[key], get(hf, key), raw[key], TARGET, target)

    return [
        row(f"save into a new folder ({size}), wall", "fresh_s"),
        row("save into a new folder, CPU of the process", "fresh_cpu_s"),
        row("save again over the previous save in the same folder, wall", "overwrite_s"),
        row("save again over the previous save, CPU of the process", "overwrite_cpu_s"),
        Row(
            "peak RSS growth while saving",
            "MB",
            ours["rss_growth"] / MB,
            get(hf, "rss_growth", MB),
            raw["rss_growth"] / MB,
            "",
            None,
        ),
    ]
