"""Train with whatever strategy ``accel launch`` chose (``--strategy fixture_ddp`` here): float64,
SGD, per-rank batches of 4; writes the strategy's class, the loss of every global batch (the mean
over the ranks) and the final weights to ``$OUT``."""

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
losses = []
for _epoch in range(2):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(loss.detach().reshape(1)).mean().item())
weights = accelerator.get_state_dict(model)
strategy = accelerator.strategy
if accelerator.is_main_process:
    out = Path(os.environ["OUT"])
    torch.save({k: v.detach().cpu() for k, v in weights.items()}, out / "weights.pt")
    report = {
        "class": f"{type(strategy).__module__}:{type(strategy).__qualname__}",
        "name": strategy.name,
        "setups": getattr(type(strategy), "setups", 0),
        "num_processes": accelerator.num_processes,
        "losses": losses,
    }
    (out / "report.json").write_text(json.dumps(report))
accelerator.end_training()
