"""Workers of the checkpoint-layout tests, run on real gloo processes by
``accel_testing.run_workers``: ``run OUT LABEL STEP...``, each STEP ``save:STRATEGY:MODEL:NAME`` or
``load:STRATEGY:MODEL:NAME``, done in order, each with a fresh Accelerator.

STRATEGY is ``ddp`` (DDP, or the single-device strategy on one process), ``fsdp2`` (sharded over
every process) or ``tp`` (FSDP2 with ``dp_shard_size=2, tp_size=2``: 4 processes); MODEL is
``net`` (a residual stack, wrapped per block) or ``mlp`` (the tensor-parallel one of
``nd/nd_workers.py``). A save trains 2 steps and writes ``OUT/NAME``, and rank 0 writes the full
model and optimizer states at that point, gathered (``OUT/NAME.expected.pt``: parameter names,
DCP's optimizer form). A load starts from other weights, ``load_state``'s ``OUT/NAME``, gathers
the same full states and compares them with the saved ones exactly; then trains one more step.
Every rank writes ``OUT/result_<LABEL>_<rank>.json``: for each load, the first difference of model
and optimizer (``None``: equal), and that they differed before the load.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from fsdp_workers import Net, _reset, batch

LR = 0.05


def _mlp_plan(model: torch.nn.Module, tp_mesh: object) -> None:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    parallelize_module(model, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


class MLP(torch.nn.Module):
    """Widen, narrow, classify: ``up`` split by columns, ``down`` by rows under ``tp``."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(4, 16)
        self.down = torch.nn.Linear(16, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(torch.relu(self.up(x))))


def accelerator_for(strategy: str, kind: str):
    from accel_backends import (
        FSDPStrategy,
        FullyShardedDataParallelPlugin,
        ParallelismConfig,
        TorchTensorParallelConfig,
    )
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy

    register_strategy("fsdp", FSDPStrategy)  # installed metadata may predate the entry point
    if strategy == "ddp":
        return Accelerator()
    wrap = {
        "auto_wrap_policy": "transformer_based_wrap",
        "transformer_cls_names_to_wrap": ["Block"],
    }
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, **(wrap if kind == "net" else {}))
    if strategy == "fsdp2":
        return Accelerator(fsdp_plugin=plugin)
    handler = TorchTensorParallelConfig(parallelize_fn=_mlp_plan)
    config = ParallelismConfig(dp_shard_size=2, tp_size=2, tp_handler=handler)
    return Accelerator(
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2), parallelism_config=config
    )


def new_model(kind: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return (Net() if kind == "net" else MLP()).double()


def full_states(accelerator, model, optimizer) -> dict[str, object]:
    """The full model and optimizer states, gathered on every process, as copies."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.utils._pytree import tree_map_only

    full = StateDictOptions(full_state_dict=True)
    inner = accelerator.unwrap_model(model)
    states = {
        "model": get_model_state_dict(inner, options=full),
        "optimizer": get_optimizer_state_dict(inner, optimizer.optimizer, options=full),
    }
    return tree_map_only(torch.Tensor, torch.clone, states)


def load_report(
    accelerator: object, saved: dict, before: dict, loaded: dict, losses: list[float]
) -> dict[str, object]:
    """What a rank reports for a cell: the strategy, the first difference between the saved and
    the loaded model and optimizer states (None: none), whether the states before loading
    differed from the saved ones (so the comparison can fail), whether training went on."""
    return {
        "strategy": type(accelerator.strategy).__name__,  # type: ignore[attr-defined]
        "model": first_difference(saved["model"], loaded["model"], "model"),
        "optimizer": first_difference(saved["optimizer"], loaded["optimizer"], "optimizer"),
        "differed_before": first_difference(saved["model"], before["model"]) is not None
        and first_difference(saved["optimizer"], before["optimizer"]) is not None,
        "trains": all(loss == loss for loss in losses),
    }


def first_difference(saved: object, loaded: object, where: str = "") -> str | None:
    """Where ``loaded`` differs from ``saved`` (exactly, dtypes included), or ``None``."""
    if isinstance(saved, torch.Tensor):
        if not isinstance(loaded, torch.Tensor):
            return f"{where}: {type(loaded).__name__} for a tensor"
        if saved.dtype != loaded.dtype or not torch.equal(saved, loaded):
            return f"{where}: {loaded.dtype}{tuple(loaded.shape)} differs"
        return None
    if isinstance(saved, dict):
        if not isinstance(loaded, dict) or saved.keys() != loaded.keys():
            keys = sorted(loaded) if isinstance(loaded, dict) else loaded
            return f"{where}: keys {keys} for {sorted(saved)}"
        for key in saved:
            found = first_difference(saved[key], loaded[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(saved, list | tuple):
        if not isinstance(loaded, list | tuple) or len(saved) != len(loaded):
            return f"{where}: {loaded!r} for {saved!r}"
        for number, (a, b) in enumerate(zip(saved, loaded, strict=True)):
            found = first_difference(a, b, f"{where}[{number}]")
            if found:
                return found
        return None
    return None if saved == loaded else f"{where}: {loaded!r} for {saved!r}"


def train(accelerator, model, optimizer, steps: range) -> list[float]:
    losses = []
    try:  # the processes of one tensor-parallel group take the same batch
        rank = accelerator.data_parallel_shard_rank
    except RuntimeError:  # no parallelism configuration: each process its own
        rank = accelerator.process_index
    for step in steps:
        inputs, targets = batch(step, rank)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def save(out: Path, strategy: str, kind: str, name: str) -> None:
    accelerator = accelerator_for(strategy, kind)
    model = new_model(kind, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    train(accelerator, model, optimizer, range(2))
    accelerator.save_state(out / name)
    states = full_states(accelerator, model, optimizer)
    if accelerator.is_main_process:
        torch.save(states, out / f"{name}.expected.pt")
    accelerator.wait_for_everyone()
    accelerator.end_training()


def load(out: Path, strategy: str, kind: str, name: str) -> dict[str, object]:
    accelerator = accelerator_for(strategy, kind)
    model = new_model(kind, seed=1)  # other weights: everything must come from the checkpoint
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR / 2)  # another lr too
    model, optimizer = accelerator.prepare(model, optimizer)
    saved = torch.load(out / f"{name}.expected.pt", weights_only=True)
    before = full_states(accelerator, model, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the world size changes: load_state says so
        accelerator.load_state(out / name)
    loaded = full_states(accelerator, model, optimizer)
    losses = train(accelerator, model, optimizer, range(2, 3))
    result = load_report(accelerator, saved, before, loaded, losses)
    accelerator.end_training()
    return result


def run() -> None:
    out, label, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    results: dict[str, object] = {}
    rank = int(os.environ.get("RANK", "0"))
    for step in steps:
        action, strategy, kind, name = step.split(":")
        if action == "save":
            save(out, strategy, kind, name)
        else:
            results[f"{name}->{strategy}"] = load(out, strategy, kind, name)
        _reset()
    (out / f"result_{label}_{rank}.json").write_text(json.dumps(results))
