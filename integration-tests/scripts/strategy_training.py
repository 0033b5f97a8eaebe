"""One training run, whatever strategy ``accel launch`` chose: float64, SGD, 3 epochs of a small
regression; writes the full weights and what the Accelerator says it runs (``$OUT``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator

torch.set_default_dtype(torch.float64)
accelerator = Accelerator()
torch.manual_seed(0)
features = torch.randn(48, 8)
targets = (features @ torch.arange(1.0, 9.0)).unsqueeze(-1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(features, targets), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for _epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
weights = accelerator.get_state_dict(model)
if accelerator.is_main_process:
    out = Path(os.environ["OUT"])
    torch.save({k: v.detach().cpu() for k, v in weights.items()}, out / "weights.pt")
    plugin = accelerator.state.fsdp_plugin
    report = {
        "distributed_type": str(accelerator.distributed_type),
        "strategy": accelerator.strategy.name,
        "num_processes": accelerator.num_processes,
        "fsdp": None
        if plugin is None
        else {
            "fsdp_version": plugin.fsdp_version,
            "reshard_after_forward": bool(plugin.reshard_after_forward),
            "sharding_strategy": str(plugin.sharding_strategy),
            "state_dict_type": str(plugin.state_dict_type),
            "wrapper": type(model).__name__,
        },
    }
    (out / "report.json").write_text(json.dumps(report))
accelerator.end_training()
