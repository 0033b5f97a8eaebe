"""Time one training step under FSDP2 or DeepSpeed ZeRO on 2 CPU processes (gloo).

Run under torchrun with 2 processes: ``backend_step.py BACKEND IMPLS STEPS WARMUP``. BACKEND is
``fsdp`` (FSDP2, ``fully_shard``), ``fsdp1`` (FSDP1, ``FullyShardedDataParallel``), ``zero2`` or
``zero3`` (DeepSpeed ZeRO stage 2 or 3). IMPLS is
a comma list of:

- ``accel``: accel_core.Accelerator, with ``FullyShardedDataParallelPlugin(fsdp_version=2)``
  (each ``Block`` its own unit, by transformer-based wrapping) or
  ``DeepSpeedPlugin(hf_ds_config=CONFIG)``; the loop is ``zero_grad``, forward,
  ``accelerator.backward(loss)``, ``optimizer.step()``.
- ``raw``: the same engine driven by hand: ``fully_shard`` on each ``Block`` then on the root,
  over a one-dimensional CPU mesh of both processes, with AdamW built on the sharded parameters
  (``zero_grad``, forward, ``loss.backward()``, ``step``); or ``deepspeed.initialize`` with the
  same config and a torch AdamW as client optimizer (forward, ``engine.backward(loss)``,
  ``engine.step()``).
- ``accelerate``: Hugging Face Accelerate's Accelerator with the same plugin (its own venv's
  python, without ``ACCELERATE_USE_CPU``, which would replace either engine by DDP). Accelerate
  1.15 runs DeepSpeed's engine on CPU processes but never FSDP2 (see
  benchmarks/bench_backends.py): the check below refuses to time what it builds instead.

The model (built from one seed, the same for every implementation): ``DEPTH`` residual MLP blocks
(LayerNorm, Linear WIDTH -> 4 WIDTH, GELU, Linear back; the feed-forward half of a transformer
layer) and a Linear head, 2.1M float32 parameters; MSE loss against a random target; a batch of
``BATCH`` rows per process, from a pool of ``POOL`` batches per rank cycled step by step. AdamW
(lr 1e-4) everywhere; DeepSpeed's config clips gradients at 1.0 in all three.

DeepSpeed never compiles an op here: the optimizer is torch's AdamW, and every implementation
marks DeepSpeed's shared-memory all-reduce op unavailable (``deepspeed.ops.__compatible_ops__
["deepspeed_shm_comm"] = False``) before DeepSpeed first creates its communication backend, as
accel's strategy does (DeepSpeed would otherwise compile it, about a minute on two cores, and run
its all-reduces through shared memory): all collectives run on gloo. ``DS_ACCELERATOR=cpu`` is set
before DeepSpeed is imported.

Every timed step starts after a barrier; its time is the longest of the two processes'. Steps of
the implementations named together are interleaved, alternating which goes first, so they see the
same machine load; the first WARMUP steps of each are not counted. Rank 0 prints one JSON object:
{impl: median seconds per step, "runs": {impl: [seconds...]}, "losses": {impl: [loss of each
step, mean over processes]}, "built": {impl: what the prepared model is, over how many processes,
and what the library's state says}, "configs": {impl: the config DeepSpeed's engine was built
from, after the library filled it (null for FSDP)}, "parameters": count}. Before timing, each
implementation must have built the engine asked for over both processes (FSDP2: in the 5 units
raw shards), or the workload exits saying the comparison would not be fair.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch
import torch.distributed as dist
from interleaved_steps import interleaved, mean_over_processes, report_and_end

WIDTH, DEPTH, BATCH, POOL = 256, 4, 64, 4
LR = 1e-4
WORLD = 2


class Block(torch.nn.Module):
    """A residual feed-forward layer: the unit FSDP shards on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.up = torch.nn.Linear(WIDTH, 4 * WIDTH)
        self.down = torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(DEPTH)])
        self.head = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def new_model() -> Net:
    torch.manual_seed(0)
    return Net()


def batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [
        (
            torch.randn(BATCH, WIDTH, generator=generator),
            torch.randn(BATCH, WIDTH, generator=generator),
        )
        for _ in range(POOL)
    ]


def ds_config(stage: int) -> dict:
    """One DeepSpeed config for every implementation: no ``"auto"`` left to fill."""
    return {
        "train_micro_batch_size_per_gpu": BATCH,
        "train_batch_size": BATCH * WORLD,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        # What both libraries write into the config themselves: raw's engine gets them too.
        "steps_per_print": math.inf,
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
    }


def keep_deepspeed_on_gloo() -> None:
    """Mark DeepSpeed's shared-memory comm op unavailable before its backend exists."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def loss_of(model: Callable, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


Step = Callable[[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]


def library_step(accelerator, model, optimizer) -> Step:
    def step(batch):
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        accelerator.backward(loss)
        optimizer.step()
        return loss

    return step


def fsdp_plugin(plugin_class: type, version: int = 2):
    if version == 1:  # FULL_SHARD, flat parameters (use_orig_params=False): Accelerate's defaults
        sharding = {"sharding_strategy": "FULL_SHARD"}
    else:
        sharding = {"reshard_after_forward": True}
    return plugin_class(
        fsdp_version=version,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
        **sharding,
    )


def make_library(library: str, backend: str) -> tuple[Step, str, dict | None]:
    if library == "accel":
        from accel_backends import DeepSpeedPlugin, FullyShardedDataParallelPlugin
        from accel_core import Accelerator
    else:
        from accelerate import Accelerator
        from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin
    if backend == "ddp":
        accelerator = Accelerator()
    elif backend == "fsdp":
        accelerator = Accelerator(fsdp_plugin=fsdp_plugin(FullyShardedDataParallelPlugin))
    elif backend == "fsdp1":
        accelerator = Accelerator(fsdp_plugin=fsdp_plugin(FullyShardedDataParallelPlugin, 1))
    else:
        keep_deepspeed_on_gloo()
        plugin = DeepSpeedPlugin(hf_ds_config=ds_config(int(backend[-1])))
        accelerator = Accelerator(deepspeed_plugin=plugin)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    built = describe(
        model, f"{accelerator.distributed_type}, num_processes={accelerator.num_processes}"
    )
    check(library, backend, model, built)
    return library_step(accelerator, model, optimizer), built, engine_config(model)


def engine_processes(model: torch.nn.Module) -> int:
    """The processes the engine itself shards over (not what the library believes)."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, FSDPModule):
        return next(model.parameters()).device_mesh.size()
    if isinstance(model, FullyShardedDataParallel):
        return dist.get_world_size(model.process_group)
    if isinstance(model, DistributedDataParallel):
        return dist.get_world_size(model.process_group)
    return int(getattr(model, "dp_world_size", 1))


def engine_config(model: torch.nn.Module) -> dict | None:
    """The config a DeepSpeed engine was built from, after the library's filling (None: FSDP)."""
    config = getattr(model, "_config", None)
    return dict(config._param_dict) if config is not None else None


def describe(model: torch.nn.Module, state: str = "") -> str:
    group = (
        f"{dist.get_backend()} group of {dist.get_world_size()}"
        if dist.is_initialized()
        else "no group"
    )
    shards = engine_processes(model) if dist.is_initialized() else 1
    return (
        f"{type(model).__name__} over {shards} processes ({group}){', ' + state if state else ''}"
    )


def fsdp_units(model: torch.nn.Module) -> int:
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    units = (FSDPModule, FullyShardedDataParallel)
    return sum(isinstance(module, units) for module in model.modules())


def check(impl: str, backend: str, model: torch.nn.Module, built: str) -> None:
    """Refuse to time anything but the engine asked for, sharded over both processes (FSDP2: in
    the units raw shards, each block and the root)."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    wanted, units = FSDPModule, f" in {DEPTH + 1} units"
    if backend == "fsdp1":
        wanted = FullyShardedDataParallel
    elif backend == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        wanted, units = DistributedDataParallel, ""
    elif not backend.startswith("fsdp"):
        from deepspeed import DeepSpeedEngine

        wanted, units = DeepSpeedEngine, ""
    fair = isinstance(model, wanted) and dist.is_initialized() and engine_processes(model) == WORLD
    if fair and backend.startswith("fsdp"):
        fair = fsdp_units(model) == DEPTH + 1
    if not fair:
        raise SystemExit(
            f"{impl} built {built} for {backend}, not a {wanted.__name__} over {WORLD} processes"
            f"{units}: the comparison would not be fair."
        )


def plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Step:
    """The hand-written step: zero_grad, forward, ``loss.backward()``, ``optimizer.step()``."""

    def step(batch):
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
        return loss

    return step


def make_raw(backend: str) -> tuple[Step, str, dict | None]:
    model = new_model()
    if backend == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        ddp = DistributedDataParallel(model)
        built = describe(ddp)
        check("raw", backend, ddp, built)
        return plain_step(ddp, torch.optim.AdamW(ddp.parameters(), lr=LR)), built, None
    if backend == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        built = describe(model)
        check("raw", backend, model, built)
        return plain_step(model, torch.optim.AdamW(model.parameters(), lr=LR)), built, None
    if backend == "fsdp1":
        return _raw_fsdp1(model)
    import deepspeed

    keep_deepspeed_on_gloo()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=ds_config(int(backend[-1]))
    )

    def ds_step(batch):
        loss = loss_of(engine, batch)
        engine.backward(loss)
        engine.step()
        return loss

    built = describe(engine)
    check("raw", backend, engine, built)
    return ds_step, built, engine_config(engine)


def _raw_fsdp1(model: torch.nn.Module) -> tuple[Step, str, dict | None]:
    """``FullyShardedDataParallel`` by hand: each Block a unit (torch's transformer policy),
    FULL_SHARD over a one-dimensional CPU mesh, AdamW on the flat parameters."""
    import functools

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    wrapped = FullyShardedDataParallel(
        model,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        auto_wrap_policy=policy,
        device_id=torch.device("cpu"),
        device_mesh=init_device_mesh("cpu", (dist.get_world_size(),)),
    )
    built = describe(wrapped)
    check("raw", "fsdp1", wrapped, built)
    return plain_step(wrapped, torch.optim.AdamW(wrapped.parameters(), lr=LR)), built, None


def main() -> None:
    backend, impls = sys.argv[1], sys.argv[2].split(",")
    steps, warmup = int(sys.argv[3]), int(sys.argv[4])
    if backend not in ("ddp", "fsdp", "fsdp1", "zero2", "zero3"):
        raise SystemExit(f"unknown backend {backend!r}; choose ddp, fsdp, fsdp1, zero2 or zero3")
    torch.set_num_threads(1)
    runners: dict[str, Step] = {}
    built: dict[str, str] = {}
    configs: dict[str, dict | None] = {}
    # The libraries form the process group themselves; build them first, raw reuses it.
    for impl in sorted(impls, key=lambda name: name == "raw"):
        if impl == "raw":
            runners[impl], built[impl], configs[impl] = make_raw(backend)
        elif impl in ("accel", "accelerate"):
            runners[impl], built[impl], configs[impl] = make_library(impl, backend)
        else:
            raise SystemExit(f"unknown implementation {impl!r}; choose accel, raw or accelerate")
    data = batches(dist.get_rank())
    result = interleaved(
        lambda impl, index: (runners[impl](data[index % POOL]), None),
        impls,
        steps,
        warmup,
        loss_value=lambda loss: mean_over_processes(float(loss)),
    )
    result["built"] = built
    result["configs"] = configs
    result["parameters"] = sum(p.numel() for p in new_model().parameters())
    report_and_end(result)


if __name__ == "__main__":
    main()
