"""Time ``save_state`` against ``save_state(async_save=True)`` under FSDP2 (sharded state dict)
on 2 CPU processes (gloo), and the same by hand with torch.distributed.checkpoint.

Run under torchrun with 2 processes: ``fsdp_async_save.py REPEATS FOLDER``. The state is
benchmarks/workloads/checkpoint_state.py's: an MLP of 10 Linear(2048, 2048) layers (168 MB of
float32 weights) and AdamW after one step (336 MB), here sharded by FSDP2 over the 2 processes.

accel: ``save_state(folder)`` ("sync"); ``save_state(folder, async_save=True)`` until it returns
("async_blocked", the time the training loop waits) and until ``wait_for_checkpoint()`` returns
("async_total"). raw, with a second copy of the model and optimizer built from the same seed:
``dcp.save`` of the model's and optimizer's sharded state dicts ("sync"), and torch's own
``dcp.async_save`` of them over a gloo group of its own ("async_blocked" until it returns, and
"async_total" until its future is done). Every call starts after a barrier; its time is the
longest of the two processes'. accel and raw alternate repeat by repeat; the first call of each
measurement is a warm-up (the first asynchronous save allocates the CPU copies later ones reuse)
reported apart as "first_async_blocked". Each save goes into a fresh folder, removed outside the
timed region.

Rank 0 prints one JSON object: {impl: {measure: median s}, "bytes": accel's checkpoint size}.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

LAYERS, WIDTH = 10, 2048


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def one_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, backward: Callable) -> None:
    backward(model(torch.randn(4, WIDTH)).square().mean())
    optimizer.step()
    optimizer.zero_grad()


def timed(action: Callable[[], object]) -> float:
    """The slowest process's seconds for ``action``, which starts after a barrier."""
    dist.barrier()
    start = time.perf_counter()
    action()
    seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return float(seconds)


class Accel:
    def __init__(self) -> None:
        from accel_backends import FullyShardedDataParallelPlugin
        from accel_core import Accelerator

        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, state_dict_type="SHARDED_STATE_DICT"
        )
        self.accelerator = Accelerator(fsdp_plugin=plugin)
        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = self.accelerator.prepare(model, optimizer)
        one_step(model, optimizer, self.accelerator.backward)

    def sync(self, folder: Path) -> None:
        self.accelerator.save_state(str(folder))

    def async_save(self, folder: Path) -> None:
        self.accelerator.save_state(str(folder), async_save=True)

    def wait(self) -> None:
        self.accelerator.wait_for_checkpoint()


class Raw:
    def __init__(self) -> None:
        from torch.distributed.fsdp import fully_shard

        model = build()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        self.model = fully_shard(model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        one_step(self.model, self.optimizer, lambda loss: loss.backward())
        self.group = dist.new_group(backend="gloo")
        self.future = None

    def _state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optimizer": optimizer}

    def sync(self, folder: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(self._state(), checkpoint_id=str(folder))

    def async_save(self, folder: Path) -> None:
        import torch.distributed.checkpoint as dcp

        self.future = dcp.async_save(
            self._state(), checkpoint_id=str(folder), process_group=self.group
        )

    def wait(self) -> None:
        self.future.result()
        self.future = None


def main() -> None:
    repeats, root = int(sys.argv[1]), Path(sys.argv[2])
    impls = {"accel": Accel(), "raw": Raw()}  # accel first: it sets up the process group
    runs: dict[str, dict[str, list[float]]] = {
        name: {"sync": [], "async_blocked": [], "async_total": []} for name in impls
    }
    first: dict[str, float] = {}
    for repeat in range(repeats + 1):
        order = list(impls) if repeat % 2 == 0 else list(reversed(impls))
        for name in order:
            impl = impls[name]
            folder = root / name / f"sync_{repeat}"
            sync = timed(lambda impl=impl, folder=folder: impl.sync(folder))
            folder = root / name / f"async_{repeat}"
            start = time.perf_counter()
            blocked = timed(lambda impl=impl, folder=folder: impl.async_save(folder))
            timed(impl.wait)
            total = time.perf_counter() - start
            if repeat == 0:
                first[name] = blocked
            else:
                runs[name]["sync"].append(sync)
                runs[name]["async_blocked"].append(blocked)
                runs[name]["async_total"].append(total)
            if name == "accel":
                size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            dist.barrier()
            if dist.get_rank() == 0:
                shutil.rmtree(root / name / f"sync_{repeat}")
                shutil.rmtree(folder)
    result: dict = {
        name: {m: statistics.median(v) for m, v in measures.items()}
        for name, measures in runs.items()
    }
    for name, seconds in first.items():
        result[name]["first_async_blocked"] = seconds
    result["bytes"] = size
    if dist.get_rank() == 0:
        print(json.dumps(result))
    impls["accel"].accelerator.end_training()


if __name__ == "__main__":
    main()
