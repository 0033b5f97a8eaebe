"""Training step under tensor parallelism with FSDP2 ("ND parallelism": dp_shard 2 x tp 2) on 4
CPU processes (gloo): accel against the same loop written with torch alone. Target: within 1.03x
of raw; Hugging Face Accelerate can't run it here (below).

The step (benchmarks/workloads/nd_step.py): the next batch of a data loader sharded by
data-parallel rank, zero_grad, forward, MSE loss, backward, gradient clipping at 1.0, AdamW step
of a 4.5M-parameter residual MLP (4 blocks of LayerNorm, Linear 512 -> 1024, GELU, Linear back,
and a Linear head), 64 rows per data-parallel rank, float32. Both split each block's Linears with
the same ``parallelize_module`` plan (column then row) over the ``tp`` dimension, replicate the
LayerNorms and the head over ``tp``, and shard each block and the root with ``fully_shard`` over
``dp_shard``: accel through ``ParallelismConfig(dp_shard_size=2, tp_size=2,
tp_handler=TorchTensorParallelConfig(parallelize_fn=plan))`` and ``prepare``; raw with
``init_device_mesh``, ``parallelize_module``, ``distribute_module``, ``fully_shard``,
``torch.nn.utils.clip_grad_norm_`` and a batch sampler of its data-parallel rank's batches.
Both implementations' losses and gradient norms must agree in the same launch (the same work),
and their models must be built alike (the same FSDP units and parameter placements), or the
benchmark fails.

Each figure is the median, after warm-up, of the slowest process's time for a step that starts
after a barrier; accel and raw run interleaved in the same four processes (alternating which goes
first), over several launches, and each column is the median over launches. Every launch's
figures and its accel / raw ratio are printed to stderr.

On a 2-core machine the 4 processes share the cores, and a step takes about 0.4 s, not tens of
ms: about half of it is the floor of the step's collectives and DTensor dispatch (the same loop
with WIDTH 64 and HIDDEN 128, 71k parameters, took 0.21-0.23 s). The ratio is what is compared.

Hugging Face Accelerate 1.15 refuses the same configuration on CPU processes (each launch of its
probe is printed to stderr): with ``ACCELERATE_USE_CPU=1`` its state is ``MULTI_CPU`` and
``ParallelismConfig._validate_accelerator`` raises "ParallelismConfig is only compatible
DistributedType.FSDP (version 2) or DistributedType.Multi{Device} or DistributedType.DEEPSPEED,
but got DistributedType.MULTI_CPU"; without it the state has one process and it raises
"ParallelismConfig total_size (4) does not match num_processes (1)".
"""

from __future__ import annotations

import os
import subprocess
import sys

from harness import HERE, Context, Row
from interleaved import accel_and_raw_launches, median_ms, torchrun

TITLE = "Tensor parallelism with FSDP2, dp_shard 2 x tp 2, 4 CPU processes, gloo (ms per step)"
WORKLOAD = str(HERE / "workloads" / "nd_step.py")
PROCESSES = 4
REFUSED = "Accelerate refused"


def _accelerate_refusals(hf_python: str | None) -> list[str]:
    """What Accelerate says when asked for the same configuration on CPU processes, with and
    without ``ACCELERATE_USE_CPU`` (empty when its venv is absent)."""
    if hf_python is None:
        return []
    refusals = []
    for use_cpu in ("1", "0"):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": use_cpu}
        command = [*torchrun(hf_python, PROCESSES), WORKLOAD, "accelerate", "1", "0"]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        lines = [line for line in done.stderr.splitlines() if line.startswith(REFUSED)]
        if done.returncode == 0 or not lines:
            raise RuntimeError(
                f"Accelerate's probe (ACCELERATE_USE_CPU={use_cpu}) did not refuse as expected: "
                f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
        refusals.append(f"ACCELERATE_USE_CPU={use_cpu}: {lines[0]}")
    return refusals


def run(ctx: Context) -> list[Row]:
    steps, warmup, launches = (10, 2, 1) if ctx.quick else (60, 5, 3)
    for refusal in _accelerate_refusals(ctx.hf_python):
        print(f"nd_parallel: {refusal}", file=sys.stderr)
    measured = accel_and_raw_launches(
        ctx.python, WORKLOAD, PROCESSES, steps, warmup, launches, "nd_parallel"
    )
    accel, raw = median_ms(measured, "accel"), median_ms(measured, "raw")
    label = "dp_shard 2 x tp 2 training step (Accelerate: n/a, refuses ParallelismConfig on CPU)"
    return [Row(label, "ms", accel, None, raw, "<= 1.03x raw", accel <= 1.03 * raw)]
