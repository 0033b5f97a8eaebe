"""The distributed self-check that ``accel test`` launches (also runnable by ``accel launch``).

Every process runs the same checks; rank 0 prints one line per check. torch.distributed is checked
directly; accel-ops' state and collectives and accel-core's training loop are checked when those
packages are importable, and skipped with the line that installs them otherwise. Exit code 1 if
any check failed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import traceback
from collections.abc import Callable
from typing import Any

INSTALL_HINT = "pip install accel-ops accel-core"


def _torch_checks(dist: Any, torch: Any) -> list[tuple[str, Callable[[], str]]]:
    rank, world = dist.get_rank(), dist.get_world_size()
    expected_sum = world * (world - 1) / 2

    def all_reduce() -> str:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        if t.item() != expected_sum:
            raise AssertionError(f"sum of ranks {t.item()} != {expected_sum}")
        return f"sum of ranks = {t.item():g}"

    def all_gather() -> str:
        parts = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(parts, torch.tensor([float(rank)]))
        got = [int(p.item()) for p in parts]
        if got != list(range(world)):
            raise AssertionError(f"gathered {got}")
        return f"gathered {got}"

    def broadcast() -> str:
        t = torch.tensor([42.0 if rank == 0 else -1.0])
        dist.broadcast(t, src=0)
        if t.item() != 42.0:
            raise AssertionError(f"got {t.item()}")
        return "rank 0's value reached every rank"

    def barrier() -> str:
        dist.barrier()
        return "all ranks arrived"

    return [
        ("torch.distributed all_reduce", all_reduce),
        ("torch.distributed all_gather", all_gather),
        ("torch.distributed broadcast", broadcast),
        ("torch.distributed barrier", barrier),
    ]


def _ops_checks(torch: Any) -> list[tuple[str, Callable[[], str]]]:
    import accel_ops

    def state() -> str:
        st = accel_ops.PartialState()
        return f"process {st.process_index} of {st.num_processes} on {st.device}"

    def gather() -> str:
        st = accel_ops.PartialState()
        got = accel_ops.gather(torch.tensor([float(st.process_index)], device=st.device))
        if [int(x) for x in got.tolist()] != list(range(st.num_processes)):
            raise AssertionError(f"gathered {got.tolist()}")
        return f"gathered {[int(x) for x in got.tolist()]}"

    def broadcast() -> str:
        st = accel_ops.PartialState()
        t = torch.tensor([7.0 if st.is_main_process else 0.0], device=st.device)
        got = accel_ops.broadcast(t)
        if got.item() != 7.0:
            raise AssertionError(f"got {got.item()}")
        return "ok"

    def reduce() -> str:
        st = accel_ops.PartialState()
        got = accel_ops.reduce(torch.tensor([float(st.process_index)], device=st.device), "sum")
        expected = st.num_processes * (st.num_processes - 1) / 2
        if got.item() != expected:
            raise AssertionError(f"sum {got.item()} != {expected}")
        return f"sum = {got.item():g}"

    return [
        ("accel_ops.PartialState", state),
        ("accel_ops.gather", gather),
        ("accel_ops.broadcast", broadcast),
        ("accel_ops.reduce", reduce),
    ]


def _core_checks(torch: Any) -> list[tuple[str, Callable[[], str]]]:
    def training() -> str:
        from accel_core import Accelerator

        torch.manual_seed(0)
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(32, 4)
        data = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4
        )
        model, optimizer, data = accelerator.prepare(model, optimizer, data)
        losses = []
        for step, (inputs, targets) in enumerate(data):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if step == 3:
                break
        return f"{len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}"

    return [("accel_core.Accelerator training steps", training)]


def _run(name: str, check: Callable[[], str]) -> tuple[str, str, str]:
    try:
        return (name, "PASS", check())
    except Exception as error:  # a failed check is reported, the others still run
        detail = f"{type(error).__name__}: {error}"
        if os.environ.get("ACCEL_DEBUG_MODE", "").lower() in ("1", "true", "yes", "on"):
            detail += "\n" + traceback.format_exc()
        return (name, "FAIL", detail)


def main() -> int:
    """Run the checks; rank 0 prints the report. Returns the exit code."""
    import torch
    import torch.distributed as dist

    results: list[tuple[str, str, str]] = []
    backend = (
        "nccl"
        if torch.cuda.is_available() and os.environ.get("ACCEL_USE_CPU") != "true"
        else "gloo"
    )
    if "RANK" in os.environ and not dist.is_initialized():
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    results.append(
        (
            "process group",
            "PASS",
            f"rank {dist.get_rank()} of {dist.get_world_size()}, {dist.get_backend()}",
        )
    )
    checks = _torch_checks(dist, torch)
    missing = [
        name for name in ("accel_ops", "accel_core") if importlib.util.find_spec(name) is None
    ]
    if "accel_ops" not in missing:
        checks += _ops_checks(torch)
    if "accel_core" not in missing:
        checks += _core_checks(torch)
    results += [_run(name, check) for name, check in checks]
    everyone = _all_gather_json(dist, torch, results)
    failed = any(status == "FAIL" for per_rank in everyone for _, status, _ in per_rank)
    if dist.get_rank() == 0:
        for index, (name, status, detail) in enumerate(results):
            bad = [r for r, per_rank in enumerate(everyone) if per_rank[index][1] == "FAIL"]
            if bad and status != "FAIL":
                status, detail = "FAIL", f"failed on ranks {bad}: {everyone[bad[0]][index][2]}"
            print(f"{status} {name}: {detail}", flush=True)
        for name in missing:
            print(f"SKIP {name} checks: not installed ({INSTALL_HINT})", flush=True)
        verdict = "some checks FAILED" if failed else "all checks passed"
        count = dist.get_world_size()
        print(f"accel test: {verdict} on {count} process{'es' if count > 1 else ''}.", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


def _all_gather_json(dist: Any, torch: Any, value: Any) -> list[Any]:
    """Every rank's ``value`` (JSON-serialisable), exchanged as byte tensors.

    torch's own object collectives pickle through numpy, which a CPU-only torch install may lack;
    the self-check must work wherever torch.distributed does.
    """
    payload = torch.tensor(list(json.dumps(value).encode()), dtype=torch.uint8)
    world = dist.get_world_size()
    size = torch.tensor([payload.numel()], dtype=torch.int64)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    padded = torch.zeros(int(max(sizes)), dtype=torch.uint8)
    padded[: payload.numel()] = payload
    chunks = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(chunks, padded)
    return [
        json.loads(bytes(chunk[: int(n)].tolist()).decode())
        for chunk, n in zip(chunks, sizes, strict=True)
    ]


if __name__ == "__main__":
    raise SystemExit(main())
