"""Step 4: FSDP2 through accel-backends on one process (cuda; gloo/CPU in the dry run).

Run under ``torchrun --nproc_per_node 1``. ``Accelerator(fsdp_plugin=FSDP2 plugin)`` trains a
small residual MLP (float32) for a few AdamW steps; losses and final weights must equal a plain
PyTorch run of the same steps within 1e-5. Then ``save_state`` after step 3, train 3 more, a
fresh Accelerator + differently seeded model ``load_state`` and trains the same 3 steps: loaded
weights, losses and final weights must match.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from _report import device, run

FEATURES, HIDDEN, BATCH, STEPS = 16, 64, 32, 6
TOL = 1e-5


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(FEATURES, HIDDEN)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
        self.out = torch.nn.Linear(HIDDEN, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def batch(step: int, dev: torch.device):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(BATCH, FEATURES, generator=g)
    truth = torch.linspace(-1, 1, FEATURES * 2).reshape(FEATURES, 2)
    return x.to(dev), (x @ truth).to(dev)


def new_model(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def plain_run(dev: torch.device):
    model = new_model().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    losses = []
    for step in range(STEPS):
        x, y = batch(step, dev)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def accel_train(accelerator, model, opt, steps):
    losses = []
    for step in steps:
        x, y = batch(step, accelerator.device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def reset():
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def full(accelerator, model):
    return {k: v.detach().cpu().clone() for k, v in accelerator.get_state_dict(model).items()}


def max_diff(a, b):
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def fsdp_accelerator():
    from accel import Accelerator
    from accel.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
    )
    return Accelerator(fsdp_plugin=plugin)


def body():
    from torch.distributed.fsdp import FSDPModule

    plain_losses, plain_weights = plain_run(device())

    accelerator = fsdp_accelerator()
    model = new_model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    inner = accelerator.unwrap_model(model)
    units = [n for n, m in inner.named_modules() if isinstance(m, FSDPModule)]
    dtensor = type(inner.inp.weight).__name__
    param_device = str(next(inner.parameters()).device)
    losses = accel_train(accelerator, model, opt, range(3))
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        accelerator.save_state(str(ckpt))
        saved_files = sorted(p.name for p in ckpt.iterdir())
        saved = full(accelerator, model)
        after = accel_train(accelerator, model, opt, range(3, STEPS))
        losses += after
        fsdp_weights = full(accelerator, model)
        strategy = type(accelerator.strategy).__name__
        distributed_type = str(accelerator.distributed_type)
        reset()

        accelerator = fsdp_accelerator()
        model = new_model(seed=1)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        model, opt = accelerator.prepare(model, opt)
        accelerator.load_state(str(ckpt))
        loaded = full(accelerator, model)
        resumed = accel_train(accelerator, model, opt, range(3, STEPS))
        resumed_weights = full(accelerator, model)
    loss_diff = max(abs(a - b) for a, b in zip(losses, plain_losses, strict=True))
    weight_diff = max_diff(fsdp_weights, plain_weights)
    load_diff = max_diff(saved, loaded)
    resume_loss_diff = max(abs(a - b) for a, b in zip(after, resumed, strict=True))
    resume_weight_diff = max_diff(fsdp_weights, resumed_weights)
    numbers = {
        "device": str(accelerator.device),
        "strategy": strategy,
        "distributed_type": distributed_type,
        "fsdp_units": units,
        "param_type": dtensor,
        "param_device": param_device,
        "losses": [round(v, 6) for v in losses],
        "plain_losses": [round(v, 6) for v in plain_losses],
        "max_loss_diff_vs_plain": loss_diff,
        "max_weight_diff_vs_plain": weight_diff,
        "checkpoint_files": saved_files,
        "max_diff_saved_vs_loaded": load_diff,
        "max_loss_diff_resumed": resume_loss_diff,
        "max_weight_diff_resumed": resume_weight_diff,
        "tolerance": TOL,
    }
    ok = (
        max(loss_diff, weight_diff, load_diff, resume_loss_diff, resume_weight_diff) <= TOL
        and len(units) >= 4
        and dtensor == "DTensor"
    )
    accelerator.end_training()
    return ok, numbers


if __name__ == "__main__":
    run("4 fsdp2 1 process", body)
