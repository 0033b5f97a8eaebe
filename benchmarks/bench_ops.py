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

The last row times ``Accelerator.gather_for_metrics`` of a (1000, 1000) float32 tensor (no
prepared data loader) against raw all_gather_into_tensor into a fresh output, each round's time
taken on the slower of the two ranks (benchmarks/workloads/ops_gather_for_metrics.py).
"""

from __future__ import annotations

from harness import HERE, Context, Row, json_result

TITLE = "Collectives, 2 CPU processes, gloo, 4 MB float32 (milliseconds per call)"
WORKLOAD = str(HERE / "workloads" / "ops_collectives.py")
METRICS_WORKLOAD = str(HERE / "workloads" / "ops_gather_for_metrics.py")
HF_ENV = {"ACCELERATE_USE_CPU": "1"}  # else Accelerate runs CPU processes without a group
OPS = ("gather", "pad_across_processes", "broadcast", "reduce")


def _measure(
    python: str,
    impls: str,
    rounds: int,
    calls: int,
    workload: str = WORKLOAD,
    env: dict[str, str] | None = None,
) -> dict:
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*torchrun, workload, impls, str(rounds), str(calls)]
    return json_result(command, env=env, timeout=900)


def _gather_for_metrics_row(ctx: Context, rounds: int, calls: int) -> Row:
    ours = _measure(ctx.python, "accel,raw", rounds, calls, METRICS_WORKLOAD)
    theirs = (
        _measure(ctx.hf_python, "accelerate", rounds, calls, METRICS_WORKLOAD, HF_ENV)
        if ctx.hf_python
        else None
    )
    accel, raw = ours["accel"] * 1e3, ours["raw"] * 1e3
    accelerate = theirs["accelerate"] * 1e3 if theirs else None
    return Row(
        "gather_for_metrics, (1000, 1000) float32",
        "ms/call",
        accel,
        accelerate,
        raw,
        "<= 1.05x raw",
        accel <= 1.05 * raw,
    )


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
    rows.append(_gather_for_metrics_row(ctx, rounds, calls))
    return rows
