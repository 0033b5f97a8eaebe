"""One training run under whatever strategy ``accel launch`` chose (float32, AdamW, gradients
clipped at 1.0, 3 epochs of a small regression); writes the full weights and what the
Accelerator runs into ``$OUT``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)
features = torch.randn(48, 8)
targets = (features @ torch.arange(1.0, 9.0)).unsqueeze(-1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(features, targets), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for _epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        # DDP clips here; under DeepSpeed the engine clips in its step (gradient_clipping of the
        # config) and this returns the engine's norm.
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
weights = accelerator.get_state_dict(model)
if accelerator.is_main_process:
    out = Path(os.environ["OUT"])
    torch.save({k: v.detach().cpu().float() for k, v in weights.items()}, out / "weights.pt")
    plugin = accelerator.state.deepspeed_plugin
    report = {
        "distributed_type": str(accelerator.distributed_type),
        "strategy": accelerator.strategy.name,
        "zero_stage": None if plugin is None else plugin.zero_stage,
        "micro_batch": None
        if plugin is None
        else plugin.deepspeed_config["train_micro_batch_size_per_gpu"],
        "clipping": None if plugin is None else plugin.deepspeed_config["gradient_clipping"],
    }
    (out / "report.json").write_text(json.dumps(report))
accelerator.end_training()
