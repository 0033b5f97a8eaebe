"""Collectives on 2 CPU processes (gloo over loopback), 4 MB float32 tensors: accel_ops against
raw torch.distributed and Hugging Face Accelerate's ``accelerate.utils`` functions.

Operations: gather (concatenation along dim 0), pad_across_processes (one rank one row short),
broadcast from rank 0, reduce (sum). The raw column uses all_gather_into_tensor (or its successor
all_gather_single), broadcast and all_reduce on a clone (the libraries leave the input unchanged).
accel and raw run interleaved in the same two processes; Accelerate runs in its own venv right
after. Figures are the median per-call time in milliseconds over many rounds after warm-up;
process start-up is not measured. accel's figures include the input fingerprint that every
gather, broadcast and reduce exchanges first (one small all-gather: it turns mismatched inputs into
an error instead of garbage or a SIGABRT) and the in-flight recording for the hang report, whose
cost per call is shown on its own row.
"""

from __future__ import annotations

from harness import HERE, Context, Row, json_result

TITLE = "Collectives, 2 CPU processes, gloo, 4 MB float32 (milliseconds per call)"
WORKLOAD = str(HERE / "workloads" / "ops_collectives.py")
OPS = ("gather", "pad_across_processes", "broadcast", "reduce")


def _measure(python: str, impls: str, rounds: int, calls: int) -> dict:
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    return json_result([*torchrun, WORKLOAD, impls, str(rounds), str(calls)], timeout=900)


def run(ctx: Context) -> list[Row]:
    rounds, calls = (8, 5) if ctx.quick else (60, 10)
    ours = _measure(ctx.python, "accel,raw", rounds, calls)
    theirs = _measure(ctx.hf_python, "accelerate", rounds, calls) if ctx.hf_python else None
    rows = []
    for op in OPS:
        accel, raw = ours["accel"][op] * 1e3, ours["raw"][op] * 1e3
        accelerate = theirs["accelerate"][op] * 1e3 if theirs else None
        rows.append(Row(op, "ms/call", accel, accelerate, raw, "<= 1.05x raw", accel <= 1.05 * raw))
    recording = ours["accel_recording"] * 1e3
    gather = ours["accel"]["gather"] * 1e3
    rows.append(
        Row(
            "in-flight recording for the hang report, per collective",
            "ms/call",
            recording,
            None,
            None,
            f"<= 2% of a gather ({0.02 * gather:.3g} ms)",
            recording <= 0.02 * gather,
        )
    )
    return rows
