"""The timing loop of the multi-process step benchmarks (backend, ND, pipeline and expert
parallelism): implementations built in the same processes take turns, step by step, each timed
from a barrier as the slowest process's time, and rank 0 prints the result as one JSON line."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist


def slowest(seconds: float) -> float:
    """The longest of every process's ``seconds``."""
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


def mean_over_processes(value: float) -> float:
    """The mean of every process's ``value``."""
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor) / dist.get_world_size()


def interleaved(
    step_of: Callable[[str, int], tuple[torch.Tensor, torch.Tensor | None]],
    impls: Sequence[str],
    steps: int,
    warmup: int,
    *,
    loss_value: Callable[[torch.Tensor], float] = float,
) -> dict:
    """Run ``warmup + steps`` steps of each implementation, alternating which goes first;
    ``step_of(impl, index)`` runs one and returns its loss and gradient norm (None: none).

    Returns {impl: median seconds of the timed steps, "runs": every timed step's seconds,
    "losses": ``loss_value`` of each step's loss, "norms": each step's norm (when given)}.
    """
    runs: dict[str, list[float]] = {impl: [] for impl in impls}
    losses: dict[str, list[float]] = {impl: [] for impl in impls}
    norms: dict[str, list[float]] = {impl: [] for impl in impls}
    for index in range(warmup + steps):
        for impl in impls if index % 2 == 0 else impls[::-1]:
            dist.barrier()
            start = time.perf_counter()
            loss, norm = step_of(impl, index)
            seconds = slowest(time.perf_counter() - start)
            losses[impl].append(loss_value(loss.detach()))
            if norm is not None:
                norms[impl].append(float(norm))
            if index >= warmup:
                runs[impl].append(seconds)
    result: dict = {impl: statistics.median(values) for impl, values in runs.items()}
    result["runs"] = {impl: [round(v, 5) for v in values] for impl, values in runs.items()}
    result["losses"] = losses
    if any(norms.values()):
        result["norms"] = norms
    return result


def report_and_end(result: dict) -> None:
    """Rank 0 prints ``result`` as one JSON line; then every process ends its process group."""
    dist.barrier()
    if dist.get_rank() == 0:
        print(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
