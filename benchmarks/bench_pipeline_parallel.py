"""Training step under pipeline parallelism with FSDP2 (pp 2 x dp_shard 2) on 4 CPU processes
(gloo): accel against the same loop written with torch alone, and the pipeline's bubble measured
from the schedule against the theoretical one. Target: within 1.03x of raw.

The step (benchmarks/workloads/pp_step.py): the next batch of a data loader sharded by
data-parallel rank, zero_grad, a 1F1B schedule of 4 micro-batches over 2 stages (2 residual
blocks per stage, the head on the last; each block and the stage sharded with ``fully_shard``
over the stage's 2 data-parallel processes), MSE loss on the last stage, the batch's loss sent
to every stage, the whole model's gradient norm and clipping at 1.0, AdamW step; 1.1M
parameters, 32 rows per data-parallel rank, float32. accel through ``ParallelismConfig(
pp_size=2, dp_shard_size=2, pp_handler=PipelineParallelConfig(split_fn=split, schedule="1F1B",
microbatches=4))``, ``prepare`` and ``accelerator.forward_backward``; raw with
``init_device_mesh``, ``fully_shard``, ``PipelineStage``, ``Schedule1F1B``, the norm combined
over the ``pp`` group by hand, ``clip_grads_with_norm_``. Both implementations' losses and
gradient norms must agree in the same launch (the same work) or the benchmark fails.

Each figure is the median, after warm-up, of the slowest process's time for a step that starts
after a barrier; accel and raw run interleaved in the same four processes (alternating which goes
first), over several launches, and each column is the median over launches. Every launch's
figures are printed to stderr.

The bubble: after the timed steps, raw's schedule runs a few more steps with each stage's
forward and backward of one micro-batch timed; a stage's idle fraction is one minus their sum
over the schedule's ``step``. The theoretical bubble of 1F1B with 2 stages and 4 micro-batches
is (2 - 1) / (4 + 2 - 1) = 0.2. On a 2-core machine the 4 processes share the cores, so a stage
also "waits" while its neighbour's process has the core, and the sends and receives count as
idle: the measured fraction is an upper bound of the schedule's own bubble.

Hugging Face Accelerate has no pipeline-parallel training (its PiPPy integration is
inference-only): no Accelerate column.
"""

from __future__ import annotations

import statistics

from harness import HERE, Context, Row
from interleaved import accel_and_raw_launches, median_ms

TITLE = "Pipeline parallelism with FSDP2, pp 2 x dp_shard 2, 4 CPU processes, gloo (ms per step)"
WORKLOAD = str(HERE / "workloads" / "pp_step.py")
PROCESSES = 4


def run(ctx: Context) -> list[Row]:
    steps, warmup, launches = (10, 2, 1) if ctx.quick else (40, 5, 3)
    measured = accel_and_raw_launches(
        ctx.python, WORKLOAD, PROCESSES, steps, warmup, launches, "pipeline_parallel"
    )
    accel, raw = median_ms(measured, "accel"), median_ms(measured, "raw")
    theoretical = measured[0]["theoretical_bubble"]
    idle = [statistics.median(launch["idle"][i] for launch in measured) for i in range(2)]
    label = "pp 2 x dp_shard 2 training step, 1F1B, 4 micro-batches (Accelerate: n/a, no PP)"
    return [
        Row(label, "ms", accel, None, raw, "<= 1.03x raw", accel <= 1.03 * raw),
        *(
            Row(
                f"stage {stage} idle fraction of the schedule's step (theoretical bubble "
                f"{theoretical:.2f}; raw's schedule)",
                "fraction",
                None,
                None,
                fraction,
                f"measured vs {theoretical:.2f}",
                None,
            )
            for stage, fraction in enumerate(idle)
        ),
    ]
