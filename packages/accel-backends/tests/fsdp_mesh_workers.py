"""Worker functions of the ParallelismConfig (FSDP2 / HSDP on the device mesh) tests, run on real
gloo processes by ``accel_testing.run_workers``. Each writes what the test checks into the folder
given in argv. The model, batches and training loop are those of ``fsdp_workers``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from fsdp_workers import _full_weights, _reset, _units, new_model, train


def _mesh_facts(accelerator) -> dict[str, object]:
    """The names and sizes of ``torch_device_mesh`` and of the mesh FSDP2 shards over."""
    mesh = accelerator.torch_device_mesh
    shard_mesh = accelerator.strategy.mesh
    return {
        "dims": list(mesh.mesh_dim_names),
        "shape": list(mesh.shape),
        "flattened": {name: mesh[name].size() for name in ("dp", "dp_shard_cp", "dp_cp")},
        "shard_mesh_dims": list(shard_mesh.mesh_dim_names),
        "in_config": accelerator.parallelism_config.device_mesh is mesh,
    }


def _parameter_facts(accelerator, model) -> dict[str, object]:
    """How ``inp.weight`` (8 x 4) is laid out on this process, and the rank properties."""
    weight = accelerator.unwrap_model(model).inp.weight
    return {
        "placements": [repr(p) for p in weight.placements],
        "local_rows": int(weight.to_local().shape[0]),
        "full_rows": int(weight.shape[0]),
        "data_parallel_rank": accelerator.data_parallel_rank,
        "data_parallel_shard_rank": accelerator.data_parallel_shard_rank,
    }


def shard_config_versus_fsdp2_and_ddp() -> None:
    """``ParallelismConfig(dp_shard_size=2)`` alone, with an FSDP2 plugin too, the FSDP2 plugin
    alone (no mesh), and DDP: the same training on 2 processes; writes all results."""
    from accel_backends import FullyShardedDataParallelPlugin, ParallelismConfig
    from accel_core import Accelerator

    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    errors = {}
    for name, options in (
        (
            "ddp_with_shards",
            {"strategy": "ddp", "parallelism_config": ParallelismConfig(dp_shard_size=2)},
        ),
        (
            "fsdp_with_replicas_only",
            {
                "fsdp_plugin": FullyShardedDataParallelPlugin(fsdp_version=2),
                "parallelism_config": ParallelismConfig(dp_replicate_size=2),
            },
        ),
    ):
        try:
            Accelerator(**options)
        except ValueError as error:
            errors[name] = str(error)
        _reset()
    runs: dict[str, object] = {"errors": errors}
    weights: dict[str, dict[str, torch.Tensor]] = {}
    for run in ("config", "config_and_plugin", "plugin", "ddp"):
        options: dict[str, object] = {}
        if run.startswith("config"):
            options["parallelism_config"] = ParallelismConfig(dp_shard_size=2)
        if run.endswith("plugin"):
            options["fsdp_plugin"] = FullyShardedDataParallelPlugin(
                fsdp_version=2,
                auto_wrap_policy="transformer_based_wrap",
                transformer_cls_names_to_wrap=["Block"],
            )
        if run == "ddp":
            options["strategy"] = "ddp"
        accelerator = Accelerator(**options)
        model = new_model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        model, optimizer = accelerator.prepare(model, optimizer)
        facts: dict[str, object] = {
            "strategy": accelerator.strategy.name,
            "is_fsdp2": accelerator.is_fsdp2,
        }
        if run.startswith("config"):
            facts["mesh"] = _mesh_facts(accelerator)
            facts["parameter"] = _parameter_facts(accelerator, model)
            facts["units"] = _units(accelerator.unwrap_model(model))
        elif run == "plugin":
            facts["mesh"] = accelerator.torch_device_mesh
        facts["losses"] = train(accelerator, model, optimizer, range(steps))
        weights[run] = _full_weights(accelerator, model)
        runs[run] = facts
        last = run == "ddp"
        if not last:
            _reset()
    if accelerator.is_main_process:
        torch.save(weights, out / "weights.pt")
        (out / "results.json").write_text(json.dumps(runs))
    accelerator.wait_for_everyone()
    accelerator.end_training()


def hsdp_versus_ddp_and_resume() -> None:
    """HSDP (``dp_replicate_size=2, dp_shard_size=2``) on 4 processes: train 3 steps,
    ``save_state`` (sharded, DCP), train 3 more; a fresh Accelerator and model ``load_state``
    and train the same 3; then DDP on 4 processes trains all 6. Writes every process's facts."""
    from accel_backends import ParallelismConfig
    from accel_core import Accelerator

    out = Path(sys.argv[1])

    def hsdp(seed: int) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer]:
        config = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2)
        accelerator = Accelerator(parallelism_config=config)
        model = new_model(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        return accelerator, *accelerator.prepare(model, optimizer)

    results: dict[str, object] = {}
    accelerator, model, optimizer = hsdp(seed=0)
    results["strategy"] = accelerator.strategy.name
    results["mesh"] = _mesh_facts(accelerator)
    results["parameter"] = _parameter_facts(accelerator, model)
    losses = train(accelerator, model, optimizer, range(3))
    accelerator.save_state(out / "checkpoint")
    saved = _full_weights(accelerator, model)
    first = train(accelerator, model, optimizer, range(3, 6))
    first_weights = _full_weights(accelerator, model)
    _reset()

    accelerator, model, optimizer = hsdp(seed=1)  # other weights: all from the checkpoint
    accelerator.load_state(out / "checkpoint")
    loaded = _full_weights(accelerator, model)
    second = train(accelerator, model, optimizer, range(3, 6))
    second_weights = _full_weights(accelerator, model)
    _reset()

    accelerator = Accelerator(strategy="ddp")
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    ddp = train(accelerator, model, optimizer, range(6))
    ddp_weights = _full_weights(accelerator, model)
    results["resume"] = {
        "loaded": all(torch.equal(saved[k], loaded[k]) for k in saved),
        "losses": first == second,
        "weights": all(torch.equal(first_weights[k], second_weights[k]) for k in saved),
        "moved": not all(torch.equal(saved[k], first_weights[k]) for k in saved),
    }
    results["hsdp_losses"], results["ddp_losses"] = losses + first, ddp
    rank = accelerator.process_index
    torch.save({"hsdp": first_weights, "ddp": ddp_weights}, out / f"weights_{rank}.pt")
    (out / f"results_{rank}.json").write_text(json.dumps(results))
    accelerator.wait_for_everyone()
    accelerator.end_training()


def tensor_parallel_mesh_then_refused() -> None:
    """``ParallelismConfig(tp_size=2)`` on 2 processes: under ddp (named) the Accelerator and the
    mesh are built and ``prepare`` refuses the dimension; with no strategy named fsdp is chosen,
    and ``prepare`` refuses a model that is not split and comes without a plan. Writes each
    process's facts."""
    from accel_backends import ParallelismConfig
    from accel_core import Accelerator
    from accel_core.state import AcceleratorState

    out = Path(sys.argv[1])
    config = ParallelismConfig(tp_size=2)
    accelerator = Accelerator(parallelism_config=config, strategy="ddp")
    mesh = accelerator.torch_device_mesh
    facts: dict[str, object] = {
        "strategy": accelerator.strategy.name,
        "dims": list(mesh.mesh_dim_names),
        "shape": list(mesh.shape),
        "in_config": config.device_mesh is mesh,
        "tensor_parallel_rank": accelerator.tensor_parallel_rank,
        "data_parallel_rank": accelerator.data_parallel_rank,
    }
    for name in ("ddp", "default"):
        try:
            accelerator.prepare(new_model())
        except NotImplementedError as error:  # OutOfScopeError is one
            facts[f"refused_{name}"] = str(error)
        facts[f"models_{name}"] = len(accelerator._models)
        if name == "ddp":
            AcceleratorState._reset_state()  # keeps the process group
            accelerator = Accelerator(parallelism_config=ParallelismConfig(tp_size=2))
            facts["chosen"] = accelerator.strategy.name
            facts["dims_chosen"] = list(accelerator.torch_device_mesh.mesh_dim_names)
    rank = accelerator.process_index
    (out / f"tp{rank}.json").write_text(json.dumps(facts))
    accelerator.end_training()
