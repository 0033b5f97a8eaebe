"""Worker of the activation-checkpointing tests, run on 2 real processes (gloo on CPU): the same
float64 training without checkpointing, with it, with it offloading to CPU, and with it under a
size-based policy (which nests a checkpointed Linear in each checkpointed Block)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from fsdp_workers import _full_weights, _reset, _units, new_model, train

from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin, read_distributed_checkpoint


def _variant(name: str, steps: int, out: Path) -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    from torch.distributed.tensor import DTensor

    from accel_core import Accelerator

    policy = (
        {"auto_wrap_policy": "size_based_wrap", "min_num_params": 60}
        if name == "size_based"
        else {
            "auto_wrap_policy": "transformer_based_wrap",
            "transformer_cls_names_to_wrap": ["Block"],
        }
    )
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        activation_checkpointing=name != "plain",
        activation_checkpointing_offload=name == "offload",
        **policy,
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = new_model()
    calls = [0, 0]
    # Count each Block's forward calls with a pre-hook: a recompute stops as soon as it has
    # rebuilt what backward needs (torch's early stop), so it never reaches the post-hooks.
    for index, block in enumerate(model.blocks):  # the layers themselves, wrapped or not later

        def count(*_: object, index: int = index) -> None:
            calls[index] += 1

        block.register_forward_pre_hook(count)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    inner = accelerator.unwrap_model(model)
    losses = train(accelerator, model, optimizer, range(steps))
    checkpoint = out / f"checkpoint_{name}"
    accelerator.save_state(checkpoint)
    saved_keys = sorted(read_distributed_checkpoint(checkpoint / "pytorch_model_fsdp_0"))
    found = {
        "wrapper": type(inner.blocks[0]).__name__,
        "units": _units(inner),
        "calls": calls,
        "losses": losses,
        "parameter_names": [n for n, _ in inner.named_parameters()][:4],
        "state_dict_keys": sorted(inner.state_dict()),
        "checkpoint_keys": saved_keys,
        # every parameter the optimizer steps is a shard of the model (re-pointed in prepare)
        "optimizer_steps_shards": all(
            isinstance(p, DTensor) for g in optimizer.param_groups for p in g["params"]
        ),
        "optimizer_steps_model": {id(p) for g in optimizer.param_groups for p in g["params"]}
        == {id(p) for p in inner.parameters()},
    }
    weights = _full_weights(accelerator, model)
    accelerator.wait_for_everyone()
    _reset()
    return found, weights


def checkpointing_versus_plain() -> None:
    """Train ``steps`` batches under each variant; process 0 writes what each found."""
    from accel_core.strategies import register_strategy
    from accel_ops import PartialState

    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    register_strategy("fsdp", FSDPStrategy)  # installed metadata may predate the entry point
    results, weights = {}, {}
    for name in ("plain", "checkpointed", "offload", "size_based"):
        results[name], weights[name] = _variant(name, steps, out)
    if PartialState().is_main_process:
        torch.save(weights, out / "weights.pt")
        (out / "results.json").write_text(json.dumps(results))
    PartialState().wait_for_everyone()
