"""Data-loader iteration overhead on 2 CPU processes: accel's prepared loader against raw PyTorch
(a DataLoader with a DistributedSampler) and Hugging Face Accelerate's prepared loader.

A TensorDataset of 20,000 samples (32 features and a label), batch 64 per process, no shuffling.
Each process iterates whole epochs (after one warm-up epoch) and moves batches to the device; the
figures are process 0's fastest epoch, in wall time and in CPU time, divided by its batches, in
microseconds; the implementations take turns for a few rounds and each keeps its best. Sharded
loaders read their own batches; dispatched loaders read on process 0 and broadcast (no raw
equivalent).
"""

from __future__ import annotations

from harness import HERE, Context, Row, json_result

TITLE = "Data-loader iteration, 2 CPU processes (microseconds per batch per process)"
WORKLOAD = str(HERE / "workloads" / "dataloader_iterate.py")


def _per_batch_us(
    python: str, impl: str, mode: str, samples: int, repeats: int
) -> tuple[float, float]:
    """Wall and CPU microseconds per batch on process 0."""
    # --standalone: torchrun picks a free port for its rendezvous.
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*torchrun, WORKLOAD, impl, mode, str(samples), "64", str(repeats)]
    result = json_result(command, timeout=900)
    return (
        1e6 * result["epoch_s"] / result["batches"],
        1e6 * result["cpu_s"] / result["batches"],
    )


def run(ctx: Context) -> list[Row]:
    samples = 5_000 if ctx.quick else 20_000
    repeats = 3 if ctx.quick else 5
    rounds = 2 if ctx.quick else 3
    rows = []
    for mode, label in (("shard", "sharded loader"), ("dispatch", "dispatched loader")):
        runs: list[tuple[str, str]] = [(ctx.python, "accel")]
        if ctx.hf_python:
            runs.append((ctx.hf_python, "accelerate"))
        if mode == "shard":
            runs.append((ctx.python, "raw"))
        # The implementations take turns, and each keeps its best round: other load on the
        # machine then hits them alike.
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for _ in range(rounds):
            for python, impl in runs:
                wall_us, cpu_us = _per_batch_us(python, impl, mode, samples, repeats)
                wall[impl] = min(wall_us, wall.get(impl, wall_us))
                cpu[impl] = min(cpu_us, cpu.get(impl, cpu_us))
        for kind, values in (("wall", wall), ("CPU of process 0", cpu)):
            accelerate = values.get("accelerate")
            rows.append(
                Row(
                    f"{label}, {samples} samples, batch 64 ({kind})",
                    "us/batch",
                    values["accel"],
                    accelerate,
                    values.get("raw"),
                    "<= 1.1x Accelerate",
                    None if accelerate is None else values["accel"] <= 1.1 * accelerate,
                )
            )
    return rows
