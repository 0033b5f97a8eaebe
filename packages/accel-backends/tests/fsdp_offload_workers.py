"""Worker of the CPU-offload test, run on 2 real gloo processes: the same float64 training with
and without ``cpu_offload`` on a CPU run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from fsdp_workers import _full_weights, _reset, new_model, train

from accel_backends import FullyShardedDataParallelPlugin


def offload_versus_plain() -> None:
    """Train 5 steps without offload, with ``cpu_offload=True`` and with torch's default
    ``CPUOffloadPolicy()`` (pinned memory); process 0 writes the losses, weights and devices."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    from accel_core import Accelerator
    from accel_ops import PartialState

    out = Path(sys.argv[1])
    found, weights = {}, {}
    for name, offload in (("plain", False), ("flag", True), ("policy", CPUOffloadPolicy())):
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            cpu_offload=offload,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
        )
        accelerator = Accelerator(fsdp_plugin=plugin)
        model = new_model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        model, optimizer = accelerator.prepare(model, optimizer)
        losses = train(accelerator, model, optimizer, range(5))
        inner = accelerator.unwrap_model(model)
        found[name] = {
            "policy": type(plugin.cpu_offload).__name__,
            "losses": losses,
            "devices": sorted({str(p.device) for p in inner.parameters()}),
        }
        weights[name] = _full_weights(accelerator, model)
        accelerator.wait_for_everyone()
        _reset()
    if PartialState().is_main_process:
        torch.save(weights, out / "weights.pt")
        (out / "results.json").write_text(json.dumps(found))
    PartialState().wait_for_everyone()
