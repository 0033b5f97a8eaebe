"""Time a resharding load: an FSDP2 checkpoint written by 4 processes, loaded on 2 (gloo, CPU).

``reshard_load.py save FOLDER`` (torchrun, 4 processes): build the model and AdamW under the
``fsdp`` strategy (FSDP2, ``SHARDED_STATE_DICT``), train one step, ``save_state(FOLDER)``.

``reshard_load.py IMPL REPEATS FOLDER`` (torchrun, 2 processes): build the same model and
optimizer under FSDP2 on 2 processes, train one step (so the optimizer has state), then load
FOLDER REPEATS times (the first a warm-up, not counted), each timed call after a barrier, its time
the slowest process's. IMPL is ``accel`` (``Accelerator.load_state``: the manifest's checks, then
the model and optimizer through torch.distributed.checkpoint, which reshards, plus RNG states) or
``raw`` (by hand: ``dcp.load`` of ``get_model_state_dict`` / ``get_optimizer_state_dict``'s
sharded templates from ``pytorch_model_fsdp_0/`` and ``optimizer_0/``, then
``set_model_state_dict`` / ``set_optimizer_state_dict``). One implementation per launch, so each
process's peak resident memory (``ru_maxrss``) is its own.

Rank 0 prints one JSON object: {"load": median s, "peak_rss_mb": [per rank], "model_mb": fp32
weights, "state_mb": weights + Adam moments, "saved_world": 4, "world": 2}.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

LAYERS, WIDTH = 8, 1024
MB = 1e6


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x))


def _prepared():
    from accel_backends import FullyShardedDataParallelPlugin
    from accel_core import Accelerator

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        state_dict_type="SHARDED_STATE_DICT",
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(LAYERS)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(4, WIDTH)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return accelerator, model, optimizer


def _raw_load(accelerator, model, optimizer, folder: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=False)
    inner, inner_optimizer = accelerator.unwrap_model(model), optimizer.optimizer
    state = {"model": get_model_state_dict(inner, options=options)}
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder / "pytorch_model_fsdp_0")))
    set_model_state_dict(inner, state["model"], options=options)
    state = {"optimizer": get_optimizer_state_dict(inner, inner_optimizer, options=options)}
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder / "optimizer_0")))
    set_optimizer_state_dict(inner, inner_optimizer, state["optimizer"], options=options)


def main() -> None:
    if sys.argv[1] == "save":
        accelerator, _, _ = _prepared()
        accelerator.save_state(sys.argv[2])
        accelerator.end_training()
        return
    impl, repeats, folder = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    accelerator, model, optimizer = _prepared()
    times = []
    for _ in range(repeats + 1):
        dist.barrier()
        start = time.perf_counter()
        if impl == "accel":
            accelerator.load_state(folder)
        else:
            _raw_load(accelerator, model, optimizer, folder)
        elapsed = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(float(elapsed))
    rss = torch.tensor(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, dtype=torch.float64
    )
    gathered = [torch.zeros_like(rss) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, rss)
    parameters = sum(p.numel() for p in accelerator.unwrap_model(model).parameters())
    if dist.get_rank() == 0:
        print(
            json.dumps(
                {
                    "load": statistics.median(times[1:]),
                    "peak_rss_mb": [round(float(t), 1) for t in gathered],  # KiB -> ~MB
                    "model_mb": parameters * 4 / MB,
                    "state_mb": parameters * 12 / MB,
                    "saved_world": 4,
                    "world": dist.get_world_size(),
                }
            )
        )
    accelerator.end_training()


if __name__ == "__main__":
    main()
