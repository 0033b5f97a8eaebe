"""Training throughput on 2 CPU processes (gloo): the quicktour loop with accel's Accelerator
against the same loop written by hand with DDP (raw) and with Hugging Face Accelerate.

Two models: an MLP (256-1024-1024-10, batch 64 per process) and a small BERT classifier built from
a transformers config (2 layers, hidden 128, sequence 64, batch 16 per process, random weights).
Each step: zero_grad, forward, loss, backward, AdamW step, scheduler step, next batch from the
loader. Figures are steady-state steps per second measured inside the workers after warm-up,
median over many short rounds (benchmarks/workloads/training_loop.py). accel and raw run
interleaved in the same two processes; Accelerate runs in its own venv with its own raw loop as a
control (its "raw" figure is not shown but makes load drift between the two runs visible).
"""

from __future__ import annotations

from harness import HERE, Context, Row, json_result

TITLE = "Training throughput, 2 CPU processes, gloo (steps per second, higher is better)"
WORKLOAD = str(HERE / "workloads" / "training_loop.py")
MODELS = {"mlp": "MLP 256-1024-1024-10", "transformer": "BERT 2x128 classifier"}


def _measure(python: str, model: str, impls: str, rounds: int, steps: int) -> dict:
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    return json_result([*torchrun, WORKLOAD, model, impls, str(rounds), str(steps)], timeout=1200)


def run(ctx: Context) -> list[Row]:
    rounds, steps = (10, 5) if ctx.quick else (30, 5)
    rows = []
    for model, label in MODELS.items():
        ours = _measure(ctx.python, model, "accel,raw", rounds, steps)
        theirs = (
            _measure(ctx.hf_python, model, "accelerate,raw", rounds, steps)
            if ctx.hf_python
            else None
        )
        accel, raw = ours["accel"], ours["raw"]
        accelerate = theirs["accelerate"] if theirs else None
        met = accel >= 0.98 * raw and (accelerate is None or accel >= accelerate)
        rows.append(
            Row(
                f"{label} training steps",
                "steps/s",
                accel,
                accelerate,
                raw,
                ">= 0.98x raw and >= 1.0x Accelerate",
                met,
            )
        )
    return rows
