"""Training step under expert parallelism with FSDP2 (dp_shard 4, ep 2) on 4 CPU processes
(gloo): accel against the same loop written with torch alone. Target: within 1.03x of raw.

The step (benchmarks/workloads/ep_step.py): the next batch of a data loader sharded by
data-parallel rank, zero_grad, forward, MSE loss, backward, the whole model's gradient norm and
clipping at 1.0, AdamW step of a 1.1M-parameter model of 2 residual mixture-of-experts blocks (8
experts each, 2 per token) and a Linear head, 16 x 16 tokens per process, float32. accel through
``ParallelismConfig(dp_shard_size=4, ep_size=2)`` and ``prepare`` (it finds the experts, splits
them and dispatches the tokens all-to-all); raw with ``init_device_mesh``, ``DTensor.from_local``,
a hand-written all-to-all dispatch, ``fully_shard`` (the experts over the processes holding
them, with ``set_gradient_divide_factor``), the norm combined over the two meshes by hand and
``clip_grads_with_norm_``. Both implementations' losses and gradient norms must agree in the
same launch (the same work) or the benchmark fails.

Each figure is the median, after warm-up, of the slowest process's time for a step that starts
after a barrier; accel and raw run interleaved in the same four processes (alternating which goes
first), over several launches, and each column is the median over launches. Every launch's
figures are printed to stderr.

Hugging Face Accelerate has no expert parallelism of its own (only a transformers model
transformers splits, whose experts its FSDP2 path overwrites with process 0's): no Accelerate
column.
"""

from __future__ import annotations

from harness import HERE, Context, Row
from interleaved import accel_and_raw_launches, median_ms

TITLE = "Expert parallelism with FSDP2, dp_shard 4 = ep 2 x 2, 4 CPU processes, gloo (ms per step)"
WORKLOAD = str(HERE / "workloads" / "ep_step.py")
PROCESSES = 4


def run(ctx: Context) -> list[Row]:
    steps, warmup, launches = (10, 2, 1) if ctx.quick else (40, 5, 3)
    measured = accel_and_raw_launches(
        ctx.python, WORKLOAD, PROCESSES, steps, warmup, launches, "expert_parallel"
    )
    accel, raw = median_ms(measured, "accel"), median_ms(measured, "raw")
    label = "ep 2 x dp_shard 4 training step, 8 experts, top-2 (Accelerate: n/a, no EP)"
    return [Row(label, "ms", accel, None, raw, "<= 1.03x raw", accel <= 1.03 * raw)]
