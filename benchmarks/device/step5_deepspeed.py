"""Step 5: DeepSpeed ZeRO-2 through accel-backends on one process (cuda; gloo/CPU in the dry run).

Run under ``torchrun --nproc_per_node 1``. ``Accelerator(deepspeed_plugin=DeepSpeedPlugin(
zero_stage=2))`` with a torch AdamW and a prepared DataLoader (fp32): the losses and final
weights are compared with a plain PyTorch run of the same batches (tolerance 1e-5), the loss
must fall, then ``save_state``, two more steps, ``load_state`` must give back the saved weights.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from _report import device, run

FEATURES, HIDDEN, BATCH, STEPS = 16, 64, 16, 8
TOL = 1e-5


def new_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, 2),
    )


def dataset():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(BATCH * STEPS, FEATURES, generator=g)
    truth = torch.linspace(-1, 1, FEATURES * 2).reshape(FEATURES, 2)
    return torch.utils.data.TensorDataset(x, x @ truth)


def loader():
    return torch.utils.data.DataLoader(dataset(), batch_size=BATCH, shuffle=False)


def plain_run(dev):
    model = new_model().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    losses = []
    for x, y in loader():
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def reset():
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def weights(accelerator, model):
    return {
        k: v.detach().cpu().float().clone() for k, v in accelerator.get_state_dict(model).items()
    }


def max_diff(a, b):
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def body():
    import deepspeed

    from accel import Accelerator
    from accel.utils import DeepSpeedPlugin

    plain_losses, plain_weights = plain_run(device())
    plugin = DeepSpeedPlugin(zero_stage=2, gradient_clipping=0.0)  # no clipping, like the plain run
    accelerator = Accelerator(deepspeed_plugin=plugin)
    model = new_model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, opt, data = accelerator.prepare(model, opt, loader())
    engine = type(model).__name__
    stage = model.zero_optimization_stage()
    config = {
        k: plugin.deepspeed_config.get(k)
        for k in ("gradient_clipping", "train_micro_batch_size_per_gpu", "zero_optimization")
    }
    losses = []
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    trained = weights(accelerator, model)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        accelerator.save_state(str(ckpt))
        files = sorted(p.name for p in ckpt.iterdir())
        # train on (the weights move), then load_state into the same engine: the saved weights
        # come back. (A second engine after end_training in the same process is not tried:
        # DeepSpeed keeps the destroyed one-process group; see RESULTS.md.)
        for step, (x, y) in enumerate(data):
            if step == 2:
                break
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
        moved = max_diff(trained, weights(accelerator, model))
        accelerator.load_state(str(ckpt))
        loaded = weights(accelerator, model)
    loss_diff = max(abs(a - b) for a, b in zip(losses, plain_losses, strict=True))
    weight_diff = max_diff(trained, plain_weights)
    load_diff = max_diff(trained, loaded)
    numbers = {
        "device": str(accelerator.device),
        "deepspeed": deepspeed.__version__,
        "engine": engine,
        "zero_stage": stage,
        "config": config,
        "losses": [round(v, 6) for v in losses],
        "plain_losses": [round(v, 6) for v in plain_losses],
        "max_loss_diff_vs_plain": loss_diff,
        "max_weight_diff_vs_plain": weight_diff,
        "checkpoint_entries": files,
        "moved_after_save": moved,
        "max_diff_saved_vs_loaded": load_diff,
        "tolerance": TOL,
    }
    ok = (
        stage == 2
        and losses[-1] < losses[0]
        and max(loss_diff, weight_diff, load_diff) <= TOL
        and moved > 0
    )
    accelerator.end_training()
    return ok, numbers


if __name__ == "__main__":
    run("5 deepspeed zero2 1 process", body)
