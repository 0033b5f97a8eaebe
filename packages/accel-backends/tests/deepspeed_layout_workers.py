"""Workers of the DeepSpeed layout tests (``test_deepspeed_layouts.py``), run on real gloo
processes: ``run OUT LABEL STEP...``, each STEP ``save:STRATEGY:NAME`` or ``load:STRATEGY:NAME``,
STRATEGY ``zero2`` / ``zero3`` (DeepSpeed), ``fsdp2`` or ``ddp`` (one process: single device).

Saves train 2 steps and write ``OUT/NAME`` and, from rank 0, the full weights and optimizer state
at that point in DCP's form (``OUT/NAME.expected.pt``; under DeepSpeed gathered through
``deepspeed.utils.safe_get_full_fp32_param`` / ``safe_get_full_optimizer_state``). Loads start
from other weights, ``load_state`` and compare the same full states exactly. A launch whose steps
use no DeepSpeed strategy runs with ``deepspeed`` made unimportable: converting a ZeRO checkpoint
needs no DeepSpeed. Every rank writes ``OUT/result_<LABEL>_<rank>.json``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from deepspeed_workers import loader, new_model, reset, step_batch
from layout_workers import load_report

LR = 0.05


def accelerator_for(strategy: str):
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy

    if strategy.startswith("zero"):
        from accel_backends import DeepSpeedPlugin, DeepSpeedStrategy

        register_strategy("deepspeed", DeepSpeedStrategy)
        stage = int(strategy[-1])
        plugin = DeepSpeedPlugin(zero_stage=stage, zero3_save_16bit_model=stage == 3)
        return Accelerator(deepspeed_plugin=plugin)
    from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin

    register_strategy("fsdp", FSDPStrategy)
    if strategy == "fsdp2":
        return Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    return Accelerator()


def full_states(accelerator, model, optimizer, strategy: str) -> dict[str, object]:
    """The full weights and optimizer state (keyed by parameter name), on every process."""
    if not strategy.startswith("zero"):
        from layout_workers import full_states as torch_full_states

        return torch_full_states(accelerator, model, optimizer)
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    parameters = dict(model.module.named_parameters())
    base = model.optimizer.optimizer
    step = next(iter(base.state.values()), {}).get("step")
    state = {}
    for name, parameter in parameters.items() if step is not None else ():
        state[name] = {
            "step": step.clone(),
            "exp_avg": safe_get_full_optimizer_state(parameter, "exp_avg").clone(),
            "exp_avg_sq": safe_get_full_optimizer_state(parameter, "exp_avg_sq").clone(),
        }
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": list(parameters)}
        for group in base.param_groups
    ]
    weights = {n: safe_get_full_fp32_param(p).clone() for n, p in parameters.items()}
    return {"model": weights, "optimizer": {"state": state, "param_groups": groups}}


def train(accelerator, model, optimizer, steps: range) -> list[float]:
    losses = []
    for step in steps:
        inputs, targets = step_batch(step, accelerator.process_index, torch.float32)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def _prepared(strategy: str, seed: int, lr: float):
    accelerator = accelerator_for(strategy)
    model = new_model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    # a loader gives DeepSpeed its micro-batch size
    model, optimizer, _ = accelerator.prepare(model, optimizer, loader())
    return accelerator, model, optimizer


def save(out: Path, strategy: str, name: str) -> None:
    accelerator, model, optimizer = _prepared(strategy, seed=0, lr=LR)
    train(accelerator, model, optimizer, range(2))
    accelerator.save_state(out / name)
    states = full_states(accelerator, model, optimizer, strategy)
    if accelerator.is_main_process:
        torch.save(states, out / f"{name}.expected.pt")
    accelerator.wait_for_everyone()
    accelerator.end_training()


def load(out: Path, strategy: str, name: str) -> dict[str, object]:
    accelerator, model, optimizer = _prepared(strategy, seed=1, lr=LR / 2)
    saved = torch.load(out / f"{name}.expected.pt", weights_only=True)
    before = full_states(accelerator, model, optimizer, strategy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the world size changes: load_state says so
        accelerator.load_state(out / name)
    loaded = full_states(accelerator, model, optimizer, strategy)
    losses = train(accelerator, model, optimizer, range(2, 3))
    result = load_report(accelerator, saved, before, loaded, losses)
    accelerator.end_training()
    return result


def run() -> None:
    out, label, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if not any(step.split(":")[1].startswith("zero") for step in steps):
        sys.modules["deepspeed"] = None  # type: ignore[assignment] - importing it now fails
    results: dict[str, object] = {}
    for step in steps:
        action, strategy, name = step.split(":")
        if action == "save":
            save(out, strategy, name)
        else:
            results[f"{name}->{strategy}"] = load(out, strategy, name)
        reset()
    rank = int(os.environ.get("RANK", "0"))
    (out / f"result_{label}_{rank}.json").write_text(json.dumps(results))
