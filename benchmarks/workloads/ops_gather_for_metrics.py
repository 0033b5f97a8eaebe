"""Per-call time of ``Accelerator.gather_for_metrics`` on a (1000, 1000) float32 tensor.

Run under torchrun with 2 processes: ``ops_gather_for_metrics.py IMPLS ROUNDS CALLS``. IMPLS is a
comma list of ``accel`` (accel_core.Accelerator), ``raw`` (``all_gather_into_tensor``, or its
successor ``all_gather_single``, into a fresh (2000, 1000) output each call) and ``accelerate``
(Hugging Face Accelerate's Accelerator, run with its own venv's python and
``ACCELERATE_USE_CPU=1``). No data loader is prepared, so neither library has a duplicated tail
to drop: the call is the gather plus whatever the library does around it.

Implementations named together are interleaved round by round (alternating which goes first), so
they see the same machine load. Each round: a barrier, then CALLS calls; the per-call time of a
round is its time divided by CALLS, taken as the slower of the two ranks. The figure is the
median over ROUNDS rounds after two warm-up rounds. Rank 0 prints one JSON object:
{impl: seconds per call}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

SHAPE = (1000, 1000)  # float32: 4 MB per process


def library_call(accelerator_class: type) -> Callable[[torch.Tensor], torch.Tensor]:
    """``gather_for_metrics`` of a fresh Accelerator (ours or Hugging Face's) on 2 processes."""
    accelerator = accelerator_class()
    if accelerator.num_processes != 2 or not dist.is_initialized():
        raise SystemExit(
            f"{accelerator_class.__module__} did not form a 2-process group "
            f"({accelerator.distributed_type}, {accelerator.num_processes} processes): the "
            "comparison would not be fair. For Accelerate on CPU set ACCELERATE_USE_CPU=1."
        )
    return accelerator.gather_for_metrics


def raw_call(world: int) -> Callable[[torch.Tensor], torch.Tensor]:
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def gather(tensor: torch.Tensor) -> torch.Tensor:
        out = torch.empty(world * tensor.shape[0], *tensor.shape[1:])
        all_gather(out, tensor)
        return out

    return gather


def make(impl: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if impl == "accel":
        from accel_core import Accelerator

        return library_call(Accelerator)
    if impl == "accelerate":
        from accelerate import Accelerator

        return library_call(Accelerator)
    if impl == "raw":
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        return raw_call(dist.get_world_size())
    raise SystemExit(f"unknown implementation {impl!r}; choose accel, raw or accelerate")


def slowest_rank(seconds: list[float]) -> list[float]:
    """Each round's time as the slower of the ranks (one all-reduce, after the timing)."""
    times = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return times.tolist()


def main() -> None:
    impls = sys.argv[1].split(",")
    rounds, calls = int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    # The libraries form the process group themselves; build them first, raw reuses it.
    functions = {impl: make(impl) for impl in sorted(impls, key=lambda name: name == "raw")}
    rank = dist.get_rank()
    torch.manual_seed(rank)
    tensor = torch.randn(*SHAPE)
    expected = raw_call(dist.get_world_size())(tensor)
    for impl, function in functions.items():  # same answer as raw, or the timing means nothing
        if not torch.equal(function(tensor), expected):
            raise SystemExit(f"{impl}: gather_for_metrics differs from all_gather_into_tensor")
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    for round_index in range(rounds + 2):  # the first two rounds are warm-up
        order = impls if round_index % 2 == 0 else impls[::-1]  # alternate who goes first
        for impl in order:
            function = functions[impl]
            dist.barrier()
            start = time.perf_counter()
            for _ in range(calls):
                function(tensor)
            elapsed = (time.perf_counter() - start) / calls
            if round_index >= 2:
                times[impl].append(elapsed)
    dist.barrier()
    result = {impl: statistics.median(slowest_rank(values)) for impl, values in times.items()}
    if rank == 0:
        print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
