"""Worker functions of the FSDP2 strategy tests, run on 2 real processes (gloo on CPU) by
``accel_testing.run_workers``. Each writes what the test checks into the folder given in argv."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FEATURES, HIDDEN, BATCH = 4, 8, 4


class Block(torch.nn.Module):
    """A residual layer: the unit transformer-based wrapping shards on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(FEATURES, HIDDEN)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.out = torch.nn.Linear(HIDDEN, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step``: the same in every run, different per rank."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    inputs = torch.randn(BATCH, FEATURES, generator=generator, dtype=torch.float64)
    truth = torch.linspace(-1, 1, FEATURES * 2, dtype=torch.float64).reshape(FEATURES, 2)
    return inputs, inputs @ truth


def new_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return Net().double()


def train(accelerator, model, optimizer, steps: range, unsynced: list | None = None) -> list[float]:
    """Train over ``steps`` (batches, under ``accumulate``); the mean loss over processes of
    each. ``unsynced`` collects, for each batch that did not synchronise, whether every
    gradient of the model was still unset (no reduce-scatter happened)."""
    losses = []
    for step in steps:
        inputs, targets = batch(step, accelerator.process_index)
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            if unsynced is not None and not accelerator.sync_gradients:
                unsynced.append(all(p.grad is None for p in model.parameters()))
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
    return losses


def _reset() -> None:
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def _full_weights(accelerator, model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}


def _units(model: torch.nn.Module) -> list[str]:
    """The qualified names of the modules sharded as an FSDP unit of their own."""
    from torch.distributed.fsdp import FSDPModule

    return [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]


def fsdp_versus_ddp() -> None:
    """The same training under FSDP2 (chosen by its plugin) and DDP; writes both results."""
    from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy
    from accel_ops import DistributedType

    out, steps, accumulation = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    register_strategy("fsdp", FSDPStrategy)  # installed metadata may predate the entry point
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
    )
    accelerator = Accelerator(fsdp_plugin=plugin, gradient_accumulation_steps=accumulation)
    strategy = accelerator.strategy
    chosen = {
        # the public class it is (FSDPStrategy(...) is an FSDP2Strategy or FSDP1Strategy)
        "strategy": "FSDPStrategy"
        if isinstance(strategy, FSDPStrategy)
        else type(strategy).__name__,
        "plugin_is_given": strategy.plugin is plugin,
        "is_fsdp2": accelerator.state.is_fsdp2,
        "distributed_type": str(accelerator.distributed_type == DistributedType.FSDP),
    }
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    inner = accelerator.unwrap_model(model)
    chosen["units"] = _units(inner)
    chosen["sharded_rows"] = int(inner.inp.weight.to_local().shape[0])
    unsynced: list[bool] = []
    fsdp_losses = train(accelerator, model, optimizer, range(steps), unsynced)
    chosen["unsynced_grads_unset"] = unsynced
    fsdp_weights = _full_weights(accelerator, model)
    _reset()

    accelerator = Accelerator(strategy="ddp", gradient_accumulation_steps=accumulation)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    ddp_losses = train(accelerator, model, optimizer, range(steps))
    ddp_weights = _full_weights(accelerator, model)
    if accelerator.is_main_process:
        torch.save({"fsdp": fsdp_weights, "ddp": ddp_weights}, out / "weights.pt")
        results = {"chosen": chosen, "fsdp_losses": fsdp_losses, "ddp_losses": ddp_losses}
        (out / "results.json").write_text(json.dumps(results))
    accelerator.wait_for_everyone()
    accelerator.end_training()


def save_load_continue() -> None:
    """Train, ``save_state``, train on; then a fresh Accelerator and model ``load_state`` and
    train the same steps. ``ACCEL_STRATEGY=fsdp`` chooses the strategy (set by the test)."""
    from safetensors.torch import save_file

    from accel_backends import FSDPStrategy
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy

    out = Path(sys.argv[1])
    register_strategy("fsdp", FSDPStrategy)
    accelerator = Accelerator()
    strategy = accelerator.strategy
    plugin = strategy.plugin
    chosen = {
        # the public class it is (FSDPStrategy(...) is an FSDP2Strategy or FSDP1Strategy)
        "strategy": "FSDPStrategy"
        if isinstance(strategy, FSDPStrategy)
        else type(strategy).__name__,
        "state_dict_type": str(plugin.state_dict_type),
        "reshard_after_forward": plugin.reshard_after_forward,
    }
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    chosen["units"] = _units(accelerator.unwrap_model(model))
    train(accelerator, model, optimizer, range(3))
    accelerator.save_state(out / "checkpoint")
    saved = _full_weights(accelerator, model)
    if accelerator.is_main_process:
        save_file(saved, out / "saved_weights.safetensors")
    first = train(accelerator, model, optimizer, range(3, 6))
    first_weights = _full_weights(accelerator, model)
    _reset()

    accelerator = Accelerator()
    model = new_model(seed=1)  # other weights: everything must come from the checkpoint
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(out / "checkpoint")
    loaded = _full_weights(accelerator, model)
    second = train(accelerator, model, optimizer, range(3, 6))
    second_weights = _full_weights(accelerator, model)
    if accelerator.is_main_process:
        same = {
            "loaded": all(torch.equal(saved[k], loaded[k]) for k in saved),
            "losses": first == second,
            "weights": all(torch.equal(first_weights[k], second_weights[k]) for k in saved),
            "moved": not all(torch.equal(saved[k], first_weights[k]) for k in saved),
        }
        (out / "results.json").write_text(json.dumps({"chosen": chosen, "same": same}))
    accelerator.wait_for_everyone()
    accelerator.end_training()
