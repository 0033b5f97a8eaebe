"""Choosing the device and backend of a process, and forming (or reusing) the process group."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from accel_ops.enums import DistributedType
from accel_ops.group_join import elastic_store, report_fewer_machines, under_elastic_agent
from accel_ops.launch_environment import LaunchEnvironment, LaunchEnvironmentError


@dataclass(frozen=True)
class ProcessPlacement:
    """Where this process sits: what :class:`~accel_ops.PartialState` records."""

    backend: str | None
    distributed_type: DistributedType
    num_processes: int
    process_index: int
    local_process_index: int
    device: torch.device
    created_group: bool


def as_timedelta(timeout: timedelta | float | int | None, default_seconds: float) -> timedelta:
    """``timeout`` as a ``timedelta``: given as one, as seconds, or ``None`` for the default."""
    if timeout is None:
        return timedelta(seconds=default_seconds)
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"timeout={timeout!r} ({type(timeout).__name__}) is not supported; pass a "
            "datetime.timedelta or a number of seconds, e.g. timeout=600"
        )
    if not seconds > 0:
        raise ValueError(f"timeout={timeout!r} must be more than 0 seconds")
    return timedelta(seconds=seconds)


def choose_device(
    cpu: bool, local_rank: int, num_processes: int, chosen: str | None = None
) -> torch.device:
    """``chosen`` when given (``ACCEL_TORCH_DEVICE``, Accelerate's ``ACCELERATE_TORCH_DEVICE``);
    else CPU when asked or when nothing else exists; else this process's CUDA device, else MPS."""
    if chosen is not None:
        device = torch.device(chosen)
        if device.type == "cuda" and device.index is not None:
            torch.cuda.set_device(device)
        return device
    if cpu:
        return torch.device("cpu")
    if torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    mps = getattr(torch.backends, "mps", None)
    if num_processes == 1 and mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _distributed_type(device: torch.device, num_processes: int) -> DistributedType:
    if num_processes <= 1:
        return DistributedType.NO
    return DistributedType.MULTI_GPU if device.type == "cuda" else DistributedType.MULTI_CPU


def place_process(
    env: LaunchEnvironment,
    cpu: bool,
    timeout: timedelta,
    backend: str | None,
    init_kwargs: dict[str, Any],
) -> ProcessPlacement:
    """Join (or reuse) the process group described by ``env`` and pick this process's device.

    An already initialised default group is reused as it is. Otherwise a group is formed only when
    ``env.world_size > 1``: gloo on CPU, nccl on CUDA, unless ``backend`` says otherwise. Under
    torch's elastic agent the group forms in a key space of its attempt's own, once every rank
    has come (:func:`accel_ops.group_join.elastic_store`); elsewhere through ``env://``.
    """
    if dist.is_available() and dist.is_initialized():
        num_processes = dist.get_world_size()
        rank = dist.get_rank()
        # Without a launcher's LOCAL_RANK, assume one machine: the local rank is the rank.
        local_rank = env.local_rank if "LOCAL_RANK" in os.environ else rank
        device = choose_device(cpu, local_rank, num_processes, env.torch_device)
        return ProcessPlacement(
            backend=str(dist.get_backend()),
            distributed_type=_distributed_type(device, num_processes),
            num_processes=num_processes,
            process_index=rank,
            local_process_index=local_rank,
            device=device,
            created_group=False,
        )
    device = choose_device(cpu, env.local_rank, env.world_size, env.torch_device)
    if under_elastic_agent() and env.rank == 0:
        report_fewer_machines(env)
    if env.world_size == 1:
        return ProcessPlacement(None, DistributedType.NO, 1, 0, 0, device, False)
    if not dist.is_available():
        raise RuntimeError(
            f"WORLD_SIZE={env.world_size} asks for {env.world_size} processes, but this torch "
            "build has no torch.distributed. Install a torch build with distributed support."
        )
    chosen = backend or ("nccl" if device.type == "cuda" else "gloo")
    kwargs = dict(init_kwargs)
    rendezvous_given = "init_method" in kwargs or "store" in kwargs
    if not rendezvous_given and under_elastic_agent():
        # a key space of this attempt's own, met within a bounded time (see group_join)
        kwargs["store"] = elastic_store(env, timeout)
    elif not rendezvous_given:
        if env.master_port is None:
            raise LaunchEnvironmentError(
                f"MASTER_PORT is not set but WORLD_SIZE={env.world_size}; expected the port of "
                "the rank-0 process's store, e.g. MASTER_PORT=29500 (torchrun and accel launch "
                "set it)."
            )
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        kwargs["init_method"] = "env://"
    if chosen == "nccl" and device.type == "cuda":
        kwargs.setdefault("device_id", device)
    dist.init_process_group(
        backend=chosen, timeout=timeout, rank=env.rank, world_size=env.world_size, **kwargs
    )
    return ProcessPlacement(
        backend=chosen,
        distributed_type=_distributed_type(device, env.world_size),
        num_processes=env.world_size,
        process_index=env.rank,
        local_process_index=env.local_rank,
        device=device,
        created_group=True,
    )
