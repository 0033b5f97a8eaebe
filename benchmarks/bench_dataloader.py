"""Data-loader iteration overhead on 2 CPU processes: accel's prepared loader against raw PyTorch
(a DataLoader with a DistributedSampler) and Hugging Face Accelerate's prepared loader.

A TensorDataset of 20,000 samples (32 features and a label), batch 64 per process, no shuffling.
Each process iterates whole epochs (after one warm-up epoch) and moves batches to the device; the
figure is the fastest epoch time divided by the batches per process, in microseconds. Sharded
loaders read their own batches; dispatched loaders read on process 0 and broadcast (no raw
equivalent).
"""

from __future__ import annotations

from harness import HERE, Context, Row, json_result

TITLE = "Data-loader iteration, 2 CPU processes (microseconds per batch per process)"
WORKLOAD = str(HERE / "workloads" / "dataloader_iterate.py")


def _per_batch_us(python: str, impl: str, mode: str, samples: int, repeats: int) -> float:
    # --standalone: torchrun picks a free port for its rendezvous.
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*torchrun, WORKLOAD, impl, mode, str(samples), "64", str(repeats)]
    result = json_result(command, timeout=900)
    return 1e6 * result["epoch_s"] / result["batches"]


def run(ctx: Context) -> list[Row]:
    samples = 5_000 if ctx.quick else 20_000
    repeats = 3 if ctx.quick else 5
    rows = []
    for mode, label in (("shard", "sharded loader"), ("dispatch", "dispatched loader")):
        accel = _per_batch_us(ctx.python, "accel", mode, samples, repeats)
        accelerate = (
            _per_batch_us(ctx.hf_python, "accelerate", mode, samples, repeats)
            if ctx.hf_python
            else None
        )
        raw = _per_batch_us(ctx.python, "raw", mode, samples, repeats) if mode == "shard" else None
        rows.append(
            Row(
                f"{label}, {samples} samples, batch 64",
                "us/batch",
                accel,
                accelerate,
                raw,
                "<= 1.0x Accelerate",
                None if accelerate is None else accel <= accelerate,
            )
        )
    return rows
