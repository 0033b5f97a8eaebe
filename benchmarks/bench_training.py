"""Training throughput on 2 CPU processes (gloo): the quicktour loop with accel's Accelerator
against the same loop written by hand with DDP (raw) and with Hugging Face Accelerate.

Two models: an MLP (256-1024-1024-10, batch 64 per process) and a small BERT classifier built from
a transformers config (2 layers, hidden 128, sequence 64, batch 16 per process, random weights).
Each step: zero_grad, forward, loss, backward, AdamW step, scheduler step, next batch from the
loader. Figures are steady-state steps per second measured inside the workers after warm-up,
median over many short rounds (benchmarks/workloads/training_loop.py). accel and raw run
interleaved in the same two processes. Accelerate runs in its own venv, in a second launch, with
the same raw loop interleaved as a control; the machine's load can change between the two
launches, so the Accelerate column is Accelerate's steps/s scaled by (raw in our launch) / (raw in
Accelerate's launch), i.e. Accelerate's speed relative to raw PyTorch, expressed at our launch's
load. The unscaled figures are printed to stderr.
"""

from __future__ import annotations

import sys

from harness import HERE, Context, Row, json_result

TITLE = "Training throughput, 2 CPU processes, gloo (steps per second, higher is better)"
WORKLOAD = str(HERE / "workloads" / "training_loop.py")
HF_ENV = {"ACCELERATE_USE_CPU": "1"}
MODELS = {"mlp": "MLP 256-1024-1024-10", "transformer": "BERT 2x128 classifier"}


def _measure(
    python: str, model: str, impls: str, rounds: int, steps: int, env: dict | None = None
) -> dict:
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*torchrun, WORKLOAD, model, impls, str(rounds), str(steps)]
    return json_result(command, env=env, timeout=1200)


def run(ctx: Context) -> list[Row]:
    rounds, steps = (10, 5) if ctx.quick else (30, 5)
    rows = []
    for model, label in MODELS.items():
        ours = _measure(ctx.python, model, "accel,raw", rounds, steps)
        theirs = (
            # Without it Accelerate treats CPU processes as independent (DistributedType.NO, no
            # DDP); `accelerate launch` sets it on machines without a GPU.
            _measure(ctx.hf_python, model, "accelerate,raw", rounds, steps, HF_ENV)
            if ctx.hf_python
            else None
        )
        accel, raw = ours["accel"], ours["raw"]
        accelerate = theirs["accelerate"] * raw / theirs["raw"] if theirs else None
        print(f"{model}: ours {ours}\n{model}: Accelerate's launch {theirs}", file=sys.stderr)
        met = accel >= 0.98 * raw and (accelerate is None or accel >= accelerate)
        rows.append(
            Row(
                f"{label} training steps (Accelerate scaled by the raw control)",
                "steps/s",
                accel,
                accelerate,
                raw,
                ">= 0.98x raw and >= 1.0x Accelerate",
                met,
            )
        )
    return rows
