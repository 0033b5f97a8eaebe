"""Step 2: accel-core fp16 mixed precision with the gradient scaler, on cuda.

``Accelerator(mixed_precision="fp16")``, a small MLP regression, 30 steps of AdamW: the loss must
fall, ``accelerator.scaler`` must be a GradScaler, no loss or weight may be NaN/inf, and the Linear
layers must compute in float16 under autocast. On CPU (dry run here) Accelerate's rule applies:
fp16 runs in fp32 without a scaler, so only the loss and NaN checks apply.
"""

from __future__ import annotations

import math

import torch
from _report import run

STEPS = 30


def body():
    from accel import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision="fp16")
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256),
        torch.nn.GELU(),
        torch.nn.Linear(256, 256),
        torch.nn.GELU(),
        torch.nn.Linear(256, 1),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    seen_dtypes: set[str] = set()
    model[2].register_forward_hook(lambda m, i, o: seen_dtypes.add(str(o.dtype)))
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(1)
    truth = torch.randn(64, 1, generator=generator)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(128, 64, generator=generator)
        y = torch.tanh(x @ truth / 8)
        x, y = x.to(accelerator.device), y.to(accelerator.device)
        optimizer.zero_grad()
        with accelerator.autocast():
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    scaler = accelerator.scaler
    finite_weights = all(torch.isfinite(p).all().item() for p in model.parameters())
    finite_losses = all(math.isfinite(v) for v in losses)
    cuda = accelerator.device.type == "cuda"
    numbers = {
        "device": str(accelerator.device),
        "mixed_precision": accelerator.mixed_precision,
        "scaler": type(scaler).__name__ if scaler is not None else None,
        "scale": scaler.get_scale() if scaler is not None else None,
        "layer_output_dtypes": sorted(seen_dtypes),
        "loss_first": round(losses[0], 5),
        "loss_last": round(losses[-1], 5),
        "loss_first5_mean": round(sum(losses[:5]) / 5, 5),
        "loss_last5_mean": round(sum(losses[-5:]) / 5, 5),
        "finite_losses": finite_losses,
        "finite_weights": finite_weights,
    }
    ok = finite_losses and finite_weights and sum(losses[-5:]) < 0.5 * sum(losses[:5])
    if cuda:
        ok = ok and scaler is not None and seen_dtypes == {"torch.float16"}
    accelerator.end_training()
    return ok, numbers


if __name__ == "__main__":
    run("2 core fp16+GradScaler", body)
