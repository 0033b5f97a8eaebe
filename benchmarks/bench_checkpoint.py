"""Checkpoints on 2 CPU processes (gloo): ``save_state`` / ``load_state`` of a ~500 MB training
state, accel against Hugging Face Accelerate and raw ``torch.save`` / ``torch.load``.

The state (benchmarks/workloads/checkpoint_state.py): a 42M-parameter float32 MLP in DDP (168 MB)
and AdamW after one step (336 MB of exp_avg / exp_avg_sq). Raw saves the way a hand-written loop
does: rank 0 ``torch.save``s the model's and the optimizer's state dicts, then a barrier; raw
loads with ``torch.load`` + ``load_state_dict`` on every rank. The libraries write their full
checkpoint (safetensors weights, optimizer, RNG states; accel also its manifest of sizes and
checksums, written into a temporary folder renamed into place). Each figure is the median over
several calls after a warm-up of the slowest process's time for the call, which starts after a
barrier; every save goes into a fresh folder in the scratch directory (on disk, but the files
stay in the page cache: this measures the libraries, not the disk); loads read the checkpoint
back from the page cache. accel and raw run interleaved in the same two processes; Accelerate
runs in its own venv, in a second launch, with the same raw calls interleaved. The launches
alternate (ours, Accelerate's, ours, Accelerate's) and each column is the median over its
launches. Accelerate's column is not scaled by the raw control: the raw calls allocate hundreds
of MB per load, and how much that costs depends on the allocator's state in each process (glibc
serves a freed block again from its heap, or maps and zero-fills fresh pages), so the raw control
swung 3x between launches of the same code here, while the libraries did not. Every launch's
figures are printed to stderr.

A resumed run's first load is measured apart, because a process that loads into memory it used
and freed before (the calls above) skips what a new process pays: after each pair of launches,
new processes (one launch per figure, accel, raw and Accelerate in turn) build the model and the
optimizer and load the checkpoint the last launch of their kind left behind; the median of those.
"""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path

from harness import HERE, Context, Row, json_result

TITLE = "Checkpoints, 2 CPU processes, gloo, 504 MB model + AdamW state (seconds per call)"
WORKLOAD = str(HERE / "workloads" / "checkpoint_state.py")
HF_ENV = {"ACCELERATE_USE_CPU": "1"}  # else Accelerate runs CPU processes without DDP
MB = 1e6


def _torchrun(python: str) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _folder(ctx: Context, impls: str) -> Path:
    """The scratch folder of the launch measuring ``impls`` (``"accel,raw"``)."""
    return ctx.scratch / impls.replace(",", "-")


def _measure(ctx: Context, python: str, impls: str, repeats: int, env: dict | None = None) -> dict:
    folder = _folder(ctx, impls)
    shutil.rmtree(folder, ignore_errors=True)  # each launch starts from an empty folder
    command = [*_torchrun(python), WORKLOAD, impls, str(repeats), str(folder)]
    return json_result(command, env=env, timeout=600)


def _first_load(ctx: Context, python: str, impls: str, impl: str, env: dict | None = None) -> float:
    """A resumed run's first load: new processes load the checkpoint ``impl`` left behind in
    the launch that measured ``impls``."""
    checkpoint = _folder(ctx, impls) / impl / "loaded"
    command = [*_torchrun(python), WORKLOAD, "first", impl, str(checkpoint)]
    return json_result(command, env=env, timeout=600)["first_load"]


def _median(launches: list[dict], impl: str) -> dict[str, float]:
    measures = launches[0][impl]
    return {m: statistics.median(launch[impl][m] for launch in launches) for m in measures}


def run(ctx: Context) -> list[Row]:
    repeats, launches, first_loads = (3, 1, 1) if ctx.quick else (9, 2, 3)
    ours, theirs = [], []
    first: dict[str, list[float]] = {"accel": [], "raw": [], "accelerate": []}
    for _ in range(launches):
        ours.append(_measure(ctx, ctx.python, "accel,raw", repeats))
        if ctx.hf_python:
            theirs.append(_measure(ctx, ctx.hf_python, "accelerate,raw", repeats, HF_ENV))
        for _ in range(first_loads):
            first["accel"].append(_first_load(ctx, ctx.python, "accel,raw", "accel"))
            first["raw"].append(_first_load(ctx, ctx.python, "accel,raw", "raw"))
            if ctx.hf_python:
                first["accelerate"].append(
                    _first_load(ctx, ctx.hf_python, "accelerate,raw", "accelerate", HF_ENV)
                )
    print(
        f"checkpoint: ours {ours}\ncheckpoint: Accelerate's launches {theirs}\n"
        f"checkpoint: first loads {first}",
        file=sys.stderr,
    )
    accel, raw = _median(ours, "accel"), _median(ours, "raw")
    hf = _median(theirs, "accelerate") if theirs else None
    first_median = {impl: statistics.median(v) if v else None for impl, v in first.items()}

    def accelerate(measure: str) -> float | None:
        return None if hf is None else hf[measure]

    size = ours[0]["bytes"] / MB
    load_theirs = accelerate("load")
    sync = accel["save"]
    return [
        Row(
            f"save_state, {size:.0f} MB checkpoint",
            "s",
            accel["save"],
            accelerate("save"),
            raw["save"],
            "<= 1.1x raw",
            accel["save"] <= 1.1 * raw["save"],
        ),
        Row(
            "load_state of that checkpoint (into the same objects, as a reload does)",
            "s",
            accel["load"],
            load_theirs,
            raw["load"],
            "<= 1.0x Accelerate",
            None if load_theirs is None else accel["load"] <= load_theirs,
        ),
        Row(
            "load_state into newly built objects, in processes that used that memory before",
            "s",
            accel["fresh_load"],
            accelerate("fresh_load"),
            raw["fresh_load"],
            "(reported: the target is the reload above)",
            None,
        ),
        Row(
            "load_state in new processes (a resumed run's first load)",
            "s",
            first_median["accel"],
            first_median["accelerate"],
            first_median["raw"],
            "(reported: the target is the reload above)",
            None,
        ),
        Row(
            "save_state(async_save=True): time the loop is blocked (the call)",
            "s",
            accel["async_blocked"],
            None,
            None,
            f"<= 0.2x the synchronous save ({0.2 * sync:.3g} s)",
            accel["async_blocked"] <= 0.2 * sync,
        ),
        Row(
            "save_state(async_save=True): until wait_for_checkpoint() returns",
            "s",
            accel["async_total"],
            None,
            None,
            f"(synchronous save: {sync:.3g} s)",
            None,
        ),
    ]
