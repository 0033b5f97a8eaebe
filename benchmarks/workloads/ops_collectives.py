"""Per-call time of gather, pad_across_processes, broadcast and reduce on 4 MB float32 tensors.

Run under torchrun with 2 processes: ``ops_collectives.py IMPLS ROUNDS CALLS``. IMPLS is a comma
list of ``accel``, ``raw`` (plain torch.distributed) and ``accelerate`` (Hugging Face Accelerate,
run with its own venv's python). Implementations named together are interleaved round by round
(alternating which goes first), so they see the same machine load. Each round: a barrier, then
CALLS calls of one operation; the per-call time is the round's time divided by CALLS, and the
figure is the median over ROUNDS rounds after warm-up. ``OPS_ROWS`` (default 1024 rows of 1024
floats) changes the tensor size; ``OPS_ONLY`` times a single operation. Rank 0 prints one JSON
object: {impl: {op: seconds per call}}, plus ``accel_recording``: the seconds per collective
that accel-ops spends recording what it is in (for the hang report).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

ROWS, COLS = int(os.environ.get("OPS_ROWS", "1024")), 1024  # 1M float32 = 4 MB


def raw_ops(rank: int, world: int) -> dict:
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def gather(t):
        out = t.new_empty((world * t.shape[0], *t.shape[1:]))
        all_gather(out, t)
        return out

    def pad(t):
        size = torch.tensor([t.shape[0]])
        sizes = size.new_empty(world)
        all_gather(sizes, size)
        longest = int(sizes.max())
        if longest == t.shape[0]:
            return t
        out = t.new_full((longest, *t.shape[1:]), 0)
        out[: t.shape[0]].copy_(t)
        return out

    def broadcast(t):
        dist.broadcast(t, src=0)
        return t

    def reduce(t):  # same contract as the libraries: the input is left unchanged
        out = t.clone()
        dist.all_reduce(out)
        return out

    return {"gather": gather, "pad_across_processes": pad, "broadcast": broadcast, "reduce": reduce}


def accel_ops_table(rank: int, world: int) -> dict:
    import accel_ops

    accel_ops.PartialState()
    return {
        "gather": accel_ops.gather,
        "pad_across_processes": accel_ops.pad_across_processes,
        "broadcast": accel_ops.broadcast,
        "reduce": lambda t: accel_ops.reduce(t, reduction="sum"),
    }


def accelerate_table(rank: int, world: int) -> dict:
    from accelerate import PartialState
    from accelerate.utils import broadcast, gather, pad_across_processes, reduce

    PartialState(cpu=True)
    return {
        "gather": gather,
        "pad_across_processes": pad_across_processes,
        "broadcast": broadcast,
        "reduce": lambda t: reduce(t, reduction="sum"),
    }


def recording_seconds(inputs: dict) -> float:
    """Seconds per collective of accel-ops' in-flight record (begin + end), median of 5 runs."""
    from accel_ops import inflight

    tensor = next(iter(inputs.values()))
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(100_000):
            inflight.end(inflight.begin("gather", tensor))
        runs.append((time.perf_counter() - start) / 100_000)
    return statistics.median(runs)


def main() -> None:
    impls = sys.argv[1].split(",")
    rounds, calls = int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    if "accelerate" not in impls and "accel" not in impls:
        dist.init_process_group("gloo")
    tables = {}
    for impl in impls:  # accel/Accelerate form the group; raw then uses it
        maker = {"accel": accel_ops_table, "accelerate": accelerate_table, "raw": None}[impl]
        if maker is not None:
            tables[impl] = maker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if "raw" in impls:
        tables["raw"] = raw_ops(rank, world)
    inputs = {
        "gather": torch.randn(ROWS, COLS),
        "pad_across_processes": torch.randn(ROWS - rank, COLS),  # uneven: rank 1 pads one row
        "broadcast": torch.randn(ROWS, COLS),
        "reduce": torch.randn(ROWS, COLS),
    }
    only = os.environ.get("OPS_ONLY")  # e.g. OPS_ONLY=gather to time one operation
    if only:
        inputs = {only: inputs[only]}
    times: dict[str, dict[str, list[float]]] = {i: {op: [] for op in inputs} for i in impls}
    for round_index in range(rounds + 2):  # the first two rounds are warm-up
        for op, tensor in inputs.items():
            order = impls if round_index % 2 == 0 else impls[::-1]  # alternate who goes first
            for impl in order:
                function = tables[impl][op]
                dist.barrier()
                start = time.perf_counter()
                for _ in range(calls):
                    function(tensor)
                elapsed = (time.perf_counter() - start) / calls
                if round_index >= 2:
                    times[impl][op].append(elapsed)
    dist.barrier()
    result = {i: {op: statistics.median(v) for op, v in t.items()} for i, t in times.items()}
    if "accel" in impls:
        result["accel_recording"] = recording_seconds(inputs)
    if rank == 0:
        print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
