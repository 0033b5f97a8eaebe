"""Step 3: NCCL through accel_ops.PartialState and its collectives.

Run under ``torchrun --nproc_per_node N`` (or ``accel launch``). With one process no group would
be formed, so this script forms the NCCL group itself (``init_process_group("nccl",
device_id=cuda:0)``) and ``PartialState`` reuses it. With two processes on one GPU
``PartialState`` forms it (both ranks on cuda:0; recent NCCL may refuse a GPU shared by two
ranks). Checks torch's NCCL collectives and accel_ops' gather, reduce, broadcast,
gather_object, broadcast_object_list, pad_across_processes and wait_for_everyone. On CPU (dry
run here) the group is gloo.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from _report import run

NAME = sys.argv[1] if len(sys.argv) > 1 else "3 nccl"


def body():
    from accel_ops import (
        PartialState,
        broadcast,
        broadcast_object_list,
        gather,
        gather_object,
        pad_across_processes,
        reduce,
    )

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
        else:
            dist.init_process_group("gloo")
    state = PartialState()
    rank, n, dev = state.process_index, state.num_processes, state.device
    checks = {}

    # torch's own collectives on the group PartialState holds
    t = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    checks["all_reduce_sum"] = t.tolist() == [n * (n + 1) / 2] * 4
    everyone = torch.empty(n * 2, device=dev)
    dist.all_gather_into_tensor(everyone, torch.full((2,), float(rank), device=dev))
    checks["all_gather"] = everyone.tolist() == [float(r) for r in range(n) for _ in range(2)]
    b = torch.full((3,), 7.0 if rank == 0 else -1.0, device=dev)
    dist.broadcast(b, src=0)
    checks["broadcast"] = b.tolist() == [7.0] * 3

    # accel_ops' collectives (on one process they return the one-process result)
    g = gather(torch.arange(3, device=dev) + 10 * rank)
    checks["gather"] = g.tolist() == [v + 10 * r for r in range(n) for v in range(3)]
    checks["gather_device"] = g.device.type == dev.type
    r_sum = reduce(torch.tensor(float(rank + 1), device=dev), reduction="sum")
    r_mean = reduce(torch.tensor(float(rank + 1), device=dev), reduction="mean")
    checks["reduce_sum"] = r_sum.item() == n * (n + 1) / 2
    checks["reduce_mean"] = abs(r_mean.item() - (n + 1) / 2) < 1e-6
    bc = broadcast({"w": torch.full((2, 2), 5.0 if rank == 0 else 0.0, device=dev)})
    checks["accel_broadcast"] = bc["w"].tolist() == [[5.0, 5.0], [5.0, 5.0]]
    checks["gather_object"] = gather_object([f"r{rank}"]) == [f"r{r}" for r in range(n)]
    objs = broadcast_object_list([{"from": rank}])
    checks["broadcast_object_list"] = objs == [{"from": 0}]
    padded = gather(pad_across_processes(torch.ones(rank + 1, 2, device=dev)))
    checks["pad_across_processes"] = list(padded.shape) == [n * n, 2]
    state.wait_for_everyone()
    backend = str(dist.get_backend()) if dist.is_initialized() else None
    numbers = {
        "rank": rank,
        "world_size": n,
        "device": str(dev),
        "backend": backend,
        "state_backend": state.backend,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))
        if torch.cuda.is_available()
        else None,
        "all_reduce": t.tolist(),
        "gather": g.tolist(),
        "reduce_sum": r_sum.item(),
        "failed_checks": [k for k, v in checks.items() if not v],
    }
    want_backend = "nccl" if torch.cuda.is_available() else "gloo"
    ok = all(checks.values()) and backend == want_backend
    dist.destroy_process_group()
    return ok, numbers


if __name__ == "__main__":
    # only rank 0 reports
    if int(os.environ.get("RANK", "0")) != 0:
        os.environ.pop("OUT", None)
    run(NAME, body)
