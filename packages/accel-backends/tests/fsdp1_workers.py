"""Workers of the FSDP1 strategy tests (``FullyShardedDataParallel``), run on 2 real processes
(gloo on CPU) by ``accel_testing.run_workers``. Each runs several configurations one after the
other in the same processes and writes what the test checks into the folder given in argv."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from fsdp_workers import _full_weights, _reset, batch, new_model, train

from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin

#: name -> plugin fields; each trains like DDP (see test_fsdp1_strategy.py).
VARIANTS: dict[str, dict[str, object]] = {
    "full_shard": {"sharding_strategy": "FULL_SHARD"},
    "shard_grad_op": {"sharding_strategy": "SHARD_GRAD_OP", "use_orig_params": True},
    "no_shard": {"sharding_strategy": "NO_SHARD"},
    "hybrid": {"sharding_strategy": "HYBRID_SHARD", "use_orig_params": True},
    "hybrid_zero2": {"sharding_strategy": "HYBRID_SHARD_ZERO2"},
    "size_based": {"auto_wrap_policy": "size_based_wrap", "min_num_params": 60},
    "checkpointed": {"activation_checkpointing": True, "use_orig_params": True},
    "prefetch": {"backward_prefetch": "BACKWARD_POST", "forward_prefetch": True},
    "offload": {"cpu_offload": True},
}


def _plugin(fields: dict[str, object]) -> FullyShardedDataParallelPlugin:
    options: dict[str, object] = {
        "fsdp_version": 1,
        "auto_wrap_policy": "transformer_based_wrap",
        "transformer_cls_names_to_wrap": ["Block"],
        **fields,
    }
    return FullyShardedDataParallelPlugin(**options)  # type: ignore[arg-type]


def _units(model: torch.nn.Module) -> list[str]:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return [n for n, m in model.named_modules() if isinstance(m, FullyShardedDataParallel)]


def _variant(
    name: str, steps: int, accumulation: int
) -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    from accel_core import Accelerator

    accelerator = Accelerator(
        fsdp_plugin=_plugin(VARIANTS[name]), gradient_accumulation_steps=accumulation
    )
    model = new_model()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.01}]
    optimizer = torch.optim.AdamW(groups, lr=0.05, weight_decay=0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, optimizer = accelerator.prepare(model, optimizer)
    strategy = accelerator.strategy
    found: dict[str, object] = {
        "wrapper": type(model).__name__,
        "unwrapped": type(accelerator.unwrap_model(model)).__name__,
        "units": _units(model),
        "strategy": str(model.sharding_strategy),
        "groups": len(optimizer.param_groups),
        "merge_warned": any("parameter groups become one" in str(w.message) for w in caught),
        "mesh": list(strategy.mesh.shape),
        "is_fsdp2": accelerator.state.is_fsdp2,
        "losses": train(accelerator, model, optimizer, range(steps)),
    }
    weights = _full_weights(accelerator, model)
    accelerator.wait_for_everyone()
    _reset()
    return found, weights


def _ddp(steps: int, accumulation: int) -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    from accel_core import Accelerator

    accelerator = Accelerator(strategy="ddp", gradient_accumulation_steps=accumulation)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    found: dict[str, object] = {"losses": train(accelerator, model, optimizer, range(steps))}
    weights = _full_weights(accelerator, model)
    accelerator.wait_for_everyone()
    _reset()
    return found, weights


def variants_versus_ddp() -> None:
    """Train ``steps`` batches under each named variant (argv[4], comma-separated) and under
    DDP; process 0 writes what each found and the final full weights."""
    from accel_core.strategies import register_strategy
    from accel_ops import PartialState

    out, steps, accumulation = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    names = sys.argv[4].split(",")
    register_strategy("fsdp", FSDPStrategy)  # installed metadata may predate the entry point
    results, weights = {}, {}
    for name in names:
        results[name], weights[name] = _variant(name, steps, accumulation)
    results["ddp"], weights["ddp"] = _ddp(steps, accumulation)
    if PartialState().is_main_process:
        torch.save(weights, out / "weights.pt")
        (out / "results.json").write_text(json.dumps(results))
    PartialState().wait_for_everyone()


def _clipped_step(strategy: str | None) -> tuple[float, dict[str, torch.Tensor]]:
    """One float32 step with the gradients clipped to norm 0.1 (under FSDP1's ``strategy``, or
    DDP): the norm before clipping and the weights after the step."""
    from accel_core import Accelerator

    if strategy is None:
        accelerator = Accelerator(strategy="ddp")
    else:
        accelerator = Accelerator(fsdp_plugin=_plugin({"sharding_strategy": strategy}))
    model = new_model().float()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    inputs, targets = batch(0, accelerator.process_index)
    loss = torch.nn.functional.mse_loss(model(inputs.float()), targets.float())
    accelerator.backward(loss)
    norm = float(accelerator.clip_grad_norm_(model.parameters(), 0.1))
    optimizer.step()
    weights = _full_weights(accelerator, model)
    accelerator.wait_for_everyone()
    _reset()
    return norm, weights


def clipping_versus_ddp() -> None:
    """``clip_grad_norm_`` under FSDP1 (each sharding strategy: sharded, replicated, hybrid)
    and DDP, in float32 (torch's FSDP1 clipping refuses float64 gradients)."""
    from accel_core.strategies import register_strategy
    from accel_ops import PartialState

    out = Path(sys.argv[1])
    register_strategy("fsdp", FSDPStrategy)
    results, weights = {}, {}
    for name in ("FULL_SHARD", "NO_SHARD", "HYBRID_SHARD", None):
        results[str(name)], weights[str(name)] = _clipped_step(name)
    if PartialState().is_main_process:
        torch.save(weights, out / "weights.pt")
        (out / "results.json").write_text(json.dumps(results))
    PartialState().wait_for_everyone()


def save_load_continue() -> None:
    """FSDP1: train, ``save_state``, train on; a fresh Accelerator and model ``load_state`` and
    train the same steps (argv[2]: the state dict type, argv[3]: use_orig_params). Then an
    FSDP2 Accelerator loads the same checkpoint (the files are the same)."""
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy
    from accel_ops import PartialState

    out, state_dict_type, orig = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
    register_strategy("fsdp", FSDPStrategy)
    fields = {"state_dict_type": state_dict_type, "use_orig_params": orig}
    runs = []
    for attempt in range(2):
        accelerator = Accelerator(fsdp_plugin=_plugin(fields))
        model = new_model(seed=attempt)  # the second run's weights must come from the checkpoint
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        model, optimizer = accelerator.prepare(model, optimizer)
        if attempt == 0:
            train(accelerator, model, optimizer, range(3))
            accelerator.save_state(out / "checkpoint")
        else:
            accelerator.load_state(out / "checkpoint")
        loaded = _full_weights(accelerator, model)
        losses = train(accelerator, model, optimizer, range(3, 6))
        runs.append((loaded, losses, _full_weights(accelerator, model)))
        accelerator.wait_for_everyone()
        _reset()
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    model = new_model(seed=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(out / "checkpoint")
    fsdp2_loaded = _full_weights(accelerator, model)
    fsdp2_losses = train(accelerator, model, optimizer, range(3, 6))
    accelerator.wait_for_everyone()
    _reset()
    (saved, first, first_weights), (loaded, second, second_weights) = runs
    if PartialState().is_main_process:
        same = {
            "loaded": all(torch.equal(saved[k], loaded[k]) for k in saved),
            "losses": first == second,
            "weights": all(torch.equal(first_weights[k], second_weights[k]) for k in saved),
            "fsdp2_loaded": all(torch.equal(saved[k], fsdp2_loaded[k]) for k in saved),
            "fsdp2_losses": fsdp2_losses == first,
        }
        (out / "results.json").write_text(json.dumps({"same": same, "first": first}))
    PartialState().wait_for_everyone()


def rank0_weights_reach_every_process() -> None:
    """``cpu_ram_efficient_loading``: process 1 builds other weights (or meta ones), and after
    ``prepare`` every process holds process 0's."""
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy
    from accel_ops import PartialState

    out = Path(sys.argv[1])
    register_strategy("fsdp", FSDPStrategy)
    state = PartialState()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sync_module_states is set to True, with a warning
        plugin = _plugin({"cpu_ram_efficient_loading": True, "use_orig_params": True})
    accelerator = Accelerator(fsdp_plugin=plugin)
    reference = {k: v.clone() for k, v in new_model(seed=0).state_dict().items()}
    if state.process_index == 0:
        model = new_model(seed=0)
    else:
        with torch.device("meta"):
            model = new_model(seed=5)
    model = accelerator.prepare(model)
    weights = _full_weights(accelerator, model)
    # what each process holds of its own shards equals process 0's weights there
    local = {n: p.detach().clone() for n, p in model.named_parameters()}
    everywhere = accelerator.gather_for_metrics([sorted(local)], use_gather_object=True)
    if state.is_main_process:
        result = {
            "synced": plugin.sync_module_states,
            "equal": all(torch.equal(weights[k], reference[k]) for k in reference),
            "names_everywhere": everywhere[0] == everywhere[1],
        }
        (out / "results.json").write_text(json.dumps(result))
    state.wait_for_everyone()
    accelerator.end_training()


def bf16_mixed_precision() -> None:
    """FSDP1 under ``mixed_precision="bf16"``: the plugin's policy follows the Accelerator,
    float32 master weights, and the loss falls; a save inside an accumulation cycle warns."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    from accel_core import Accelerator
    from accel_core.strategies import register_strategy
    from accel_ops import PartialState

    out = Path(sys.argv[1])
    register_strategy("fsdp", FSDPStrategy)
    plugin = _plugin({"use_orig_params": True})
    accelerator = Accelerator(
        fsdp_plugin=plugin, mixed_precision="bf16", gradient_accumulation_steps=2
    )
    model = new_model().float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    again = accelerator.prepare(model)  # prepared already: returned as it is, not wrapped twice
    losses = []
    for step in range(12):
        inputs, targets = batch(step, accelerator.process_index)
        with accelerator.accumulate(model):
            output = model(inputs.float())
            loss = torch.nn.functional.mse_loss(output.float(), targets.float())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
    flat = [p.dtype for m in FullyShardedDataParallel.fsdp_modules(model) for p in m.params]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inputs, targets = batch(0, accelerator.process_index)
        with accelerator.accumulate(model):  # the first batch of a cycle: no step yet
            accelerator.backward(torch.nn.functional.mse_loss(model(inputs.float()), targets))
        accelerator.save_state(out / "mid_cycle")
    if PartialState().is_main_process:
        result = {
            "param_dtype": str(plugin.mixed_precision_policy.param_dtype),
            "flat_dtypes": sorted({str(d) for d in flat}),
            "output_dtype": str(output.dtype),
            "losses": losses,
            "prepared_twice_is_the_same": again is model,
            "mid_cycle_warned": any(
                "accumulation cycle under FSDP1" in str(w.message) for w in caught
            ),
        }
        (out / "results.json").write_text(json.dumps(result))
    PartialState().wait_for_everyone()
    accelerator.end_training()
