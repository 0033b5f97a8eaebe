"""Joining the process group, and the two exchanges every rank takes part in.

:func:`join` joins the group ``accel launch`` set up (``RANK`` in the environment: nccl when CUDA
is usable and ``ACCEL_USE_CPU`` is not ``true``, else gloo), or makes a one-process gloo group
when nothing launched this process. :func:`agree` and :func:`all_gather_json` are collectives:
every rank must call them, in the same order. They send tensors only, never pickles: torch's
object collectives unpickle through numpy, which a CPU-only torch install may lack, and the
self-check must work wherever torch.distributed does.
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from accel_launch.selfcheck.checks import Job, Result


def join(world_size: int | None, asked_by: str | None, perturb_reference: float = 0.0) -> Job:
    """Join (or make) the process group and describe this process's place in it.

    ``world_size`` is the number of processes asked for (else the launcher's ``WORLD_SIZE``, else
    1) and ``asked_by`` where it came from, for the report.
    """
    use_nccl = torch.cuda.is_available() and os.environ.get("ACCEL_USE_CPU") != "true"
    if "RANK" in os.environ and not dist.is_initialized():
        if use_nccl:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if use_nccl else "gloo")
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    nccl = dist.get_backend() == "nccl"
    if world_size is not None:
        expected, asked_by = world_size, asked_by or "--world-size"
    elif "WORLD_SIZE" in os.environ:
        expected, asked_by = int(os.environ["WORLD_SIZE"]), "the launcher (WORLD_SIZE)"
    else:
        expected, asked_by = 1, "default (no launcher)"
    return Job(
        rank=dist.get_rank(),
        world=dist.get_world_size(),
        expected_world=expected,
        asked_by=asked_by,
        device=torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu"),
        perturb_reference=perturb_reference,
    )


def agree(job: Job, flag: bool) -> bool:
    """Whether ``flag`` holds on every rank (a collective: every rank must call it)."""
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=job.device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def all_gather_json(job: Job, value: list[Result]) -> list[list[Result]]:
    """Every rank's ``value`` (JSON-serialisable), in rank order, exchanged as byte tensors."""
    payload = torch.tensor(list(json.dumps(value).encode()), dtype=torch.uint8)
    size = torch.tensor([payload.numel()], dtype=torch.int64, device=job.device)
    sizes = [torch.zeros_like(size) for _ in range(job.world)]
    dist.all_gather(sizes, size)
    padded = torch.zeros(int(max(sizes)), dtype=torch.uint8)
    padded[: payload.numel()] = payload
    padded = padded.to(job.device)
    chunks = [torch.zeros_like(padded) for _ in range(job.world)]
    dist.all_gather(chunks, padded)
    return [
        [tuple(item) for item in json.loads(bytes(chunk[: int(n)].cpu().tolist()).decode())]
        for chunk, n in zip(chunks, sizes, strict=True)
    ]
