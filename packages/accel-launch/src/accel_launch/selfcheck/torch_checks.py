"""The checks of torch.distributed itself: the world size, then each collective.

Each collective runs on per-rank inputs whose result is known: rank ``r`` contributes ``r + 1``
to all_reduce (the sum is ``world * (world + 1) / 2``) and ``r`` to all_gather (the ranks in
order); rank 0 broadcasts 42. The barrier check makes rank 0 enter BARRIER_DELAY seconds late
and fails unless every other rank waited at least BARRIER_MIN_WAIT for it.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from accel_launch.selfcheck.checks import Check, CheckFailed, Job, expect_equal

# The barrier check: rank 0 enters this late; every other rank must wait at least BARRIER_MIN_WAIT.
BARRIER_DELAY = 0.3
BARRIER_MIN_WAIT = 0.1


def torch_checks(job: Job) -> list[Check]:
    """The world size, then torch.distributed's collectives with known per-rank inputs."""
    rank, world, device = job.rank, job.world, job.device

    def world_size() -> str:
        expect_equal(
            f"number of processes (asked for by {job.asked_by})", job.expected_world, world
        )
        return f"{world} process{'es' if world > 1 else ''}, as asked for by {job.asked_by}"

    def all_reduce() -> str:
        t = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(t)
        expected = world * (world + 1) // 2
        expect_equal("sum of rank + 1 over the ranks", float(expected), t.item())
        return f"sum of rank + 1 = {expected}, as expected"

    def all_gather() -> str:
        parts = [torch.zeros(1, device=device) for _ in range(world)]
        dist.all_gather(parts, torch.tensor([float(rank)], device=device))
        got = [int(p.item()) for p in parts]
        expect_equal("the ranks gathered in rank order", list(range(world)), got)
        return f"gathered {got}, as expected"

    def broadcast() -> str:
        t = torch.tensor([42.0 if rank == 0 else -1.0], device=device)
        dist.broadcast(t, src=0)
        expect_equal("the value broadcast from rank 0", 42.0, t.item())
        return "rank 0's 42 reached every rank"

    def barrier() -> str:
        if world == 1:
            dist.barrier()
            return "one process: nothing to wait for"
        dist.all_reduce(torch.zeros(1, device=device))  # line the ranks up
        if rank == 0:
            time.sleep(BARRIER_DELAY)
        start = time.monotonic()
        dist.barrier()
        waits = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(world)]
        waited = torch.tensor([time.monotonic() - start], dtype=torch.float64, device=device)
        dist.all_gather(waits, waited)
        shortest = min(float(w.item()) for w in waits[1:])
        others = "rank 1" if world == 2 else f"ranks 1..{world - 1}"
        if shortest < BARRIER_MIN_WAIT:
            raise CheckFailed(
                f"the shortest wait of {others} for rank 0 ({BARRIER_DELAY} s late)",
                f">= {BARRIER_MIN_WAIT} s",
                f"{shortest:.3f} s",
            )
        return f"{others} waited >= {shortest:.2f} s for rank 0 ({BARRIER_DELAY} s late)"

    return [
        ("world size", world_size),
        ("torch.distributed all_reduce", all_reduce),
        ("torch.distributed all_gather", all_gather),
        ("torch.distributed broadcast", broadcast),
        ("torch.distributed barrier", barrier),
    ]
