"""Workers of the resharding tests, run by ``accel_testing.run_workers`` on real gloo processes:
``save`` on 2 processes, ``load_and_continue`` on 1, 2 or 3. Each writes what the test checks
into the folder given in argv."""

from __future__ import annotations

import copy
import json
import sys
import warnings
from pathlib import Path

import torch
from fsdp_workers import FEATURES, _full_weights, _reset, new_model, train

from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin

SAMPLES, LOADER_BATCH, SAVED_AFTER = 24, 2, 3  # 6 batches per process and epoch on 2 processes


def _accelerator(state_dict_type: str, fsdp_version: int = 2):
    from accel_core import Accelerator
    from accel_core.strategies import register_strategy

    register_strategy("fsdp", FSDPStrategy)  # installed metadata may predate the entry point
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=fsdp_version,
        state_dict_type=state_dict_type,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
    )
    return Accelerator(fsdp_plugin=plugin)


def _loader() -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator, dtype=torch.float64)
    dataset = torch.utils.data.TensorDataset(inputs, inputs.sum(dim=1, keepdim=True).repeat(1, 2))
    return torch.utils.data.DataLoader(dataset, batch_size=LOADER_BATCH)


def _full_states(accelerator, model, optimizer) -> dict[str, object]:
    """The full model and optimizer state dicts (gathered on every process, plain tensors)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.utils._pytree import tree_map_only

    full = StateDictOptions(full_state_dict=True)
    # torch's functions take FSDP1's wrapper itself, and the model FSDP2 sharded in place
    fsdp1 = isinstance(model, FullyShardedDataParallel)
    inner = model if fsdp1 else accelerator.unwrap_model(model)
    states = {
        "model": get_model_state_dict(inner, options=full),
        "optimizer": get_optimizer_state_dict(inner, optimizer.optimizer, options=full),
    }
    # copies: on one process the "full" tensors are the live parameters and optimizer states
    return tree_map_only(torch.Tensor, torch.clone, states)


def save() -> None:
    """Train ``SAVED_AFTER`` batches of the prepared loader, ``save_state`` in the middle of the
    epoch; process 0 also keeps the full states at that point (the reference's start)."""
    out, state_dict_type = Path(sys.argv[1]), sys.argv[2]
    accelerator = _accelerator(state_dict_type)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader())
    for index, (inputs, targets) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if index + 1 == SAVED_AFTER:
            accelerator.save_state(out / "checkpoint")
            break
    states = _full_states(accelerator, model, optimizer)
    if accelerator.is_main_process:
        torch.save(states, out / "at_save.pt")
    accelerator.wait_for_everyone()
    accelerator.end_training()


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def load_and_continue() -> None:
    """``load_state`` the 2-process checkpoint on this run's processes and train 3 more steps;
    then the reference: the same processes start from the full states of the save, handed over
    in memory (no checkpoint files, no resharding), and train the same steps."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    out, state_dict_type = Path(sys.argv[1]), sys.argv[2]
    steps = range(SAVED_AFTER, SAVED_AFTER + 3)
    at_save = torch.load(out / "at_save.pt", weights_only=True)
    accelerator = _accelerator(state_dict_type)
    rank, world = accelerator.process_index, accelerator.num_processes
    model = new_model(seed=1)  # other weights: everything must come from the checkpoint
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, _ = accelerator.prepare(model, optimizer, _loader())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator.load_state(out / "checkpoint")
    said = sorted(str(w.message) for w in caught if str(w.message).startswith("load_state"))
    loaded = _full_states(accelerator, model, optimizer)
    resumed = train(accelerator, model, optimizer, steps)
    resumed_weights = _full_weights(accelerator, model)
    local_rows = int(accelerator.unwrap_model(model).inp.weight.to_local().shape[0])
    _reset()

    accelerator = _accelerator(state_dict_type)
    model = new_model(seed=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    inner, full = accelerator.unwrap_model(model), StateDictOptions(full_state_dict=True)
    start = copy.deepcopy(at_save)  # torch keeps some given tensors (the steps) and updates them
    set_model_state_dict(inner, start["model"], options=full)
    set_optimizer_state_dict(inner, optimizer.optimizer, start["optimizer"], options=full)
    reference = train(accelerator, model, optimizer, steps)
    reference_weights = _full_weights(accelerator, model)
    result = {
        "world": world,
        "local_rows": local_rows,
        "warnings": said,
        "loaded_model": _equal(loaded["model"], at_save["model"]),
        "loaded_optimizer": _equal(loaded["optimizer"], at_save["optimizer"]),
        "losses": resumed == reference,
        "weights": _equal(resumed_weights, reference_weights),
        "moved": not _equal(resumed_weights, at_save["model"]),
        "losses_fall": resumed[-1] < resumed[0],
    }
    (out / f"result_{world}_{rank}.json").write_text(json.dumps(result))
    accelerator.wait_for_everyone()
    accelerator.end_training()
