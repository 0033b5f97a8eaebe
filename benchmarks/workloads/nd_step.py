"""Time one training step of tensor parallelism with FSDP2 (dp_shard 2 x tp 2) on 4 CPU processes.

Run under torchrun with 4 processes: ``nd_step.py IMPLS STEPS WARMUP``. IMPLS is a comma list of:

- ``accel``: ``accel_core.Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=2,
  tp_size=2, tp_handler=TorchTensorParallelConfig(parallelize_fn=split)), fsdp_plugin=
  FullyShardedDataParallelPlugin(fsdp_version=2, ...))`` (each ``Block`` its own FSDP unit, by
  transformer-based wrapping); ``prepare(model, optimizer, loader)`` splits the model with
  ``split``, replicates the parameters it leaves whole over ``tp`` and shards over ``dp_shard``;
  the step is ``next(loader)``, ``zero_grad``, forward, ``accelerator.backward(loss)``,
  ``accelerator.clip_grad_norm_``, ``optimizer.step()``.
- ``raw``: the same by hand with torch alone: ``init_device_mesh("cpu", (2, 2),
  mesh_dim_names=("dp_shard", "tp"))``, ``split`` on ``mesh["tp"]``, the LayerNorms and the head
  replicated over ``tp`` with ``distribute_module`` (plain tensors in, plain tensors out, as
  accel's hooks do), ``fully_shard`` on each ``Block`` then on the root over
  ``mesh["dp_shard"]``, AdamW on the result; a data loader whose batch sampler yields this
  data-parallel rank's batches (batch ``i`` goes to rank ``i % 2``, as accel's sharding does);
  the step is ``next(loader)``, ``zero_grad``, forward, ``loss.backward()``,
  ``torch.nn.utils.clip_grad_norm_``, ``optimizer.step()``.
- ``accelerate``: Hugging Face Accelerate's ``Accelerator`` with the same configuration (its
  own venv's python). Accelerate 1.15 refuses a ``ParallelismConfig`` on CPU processes, so
  nothing is timed: the workload prints its error on stderr and exits saying the comparison
  can't be made (see benchmarks/bench_nd_parallel.py).

``split`` is ``parallelize_module(model, tp_mesh, {"blocks.*.up": ColwiseParallel(),
"blocks.*.down": RowwiseParallel()})``. The model (one seed, the same for both): ``DEPTH``
residual blocks (LayerNorm, Linear WIDTH -> HIDDEN, GELU, Linear back) and a Linear head, float32;
MSE loss against a random target; ``BATCH`` rows per data-parallel rank per step, the global batch
``BATCH * 2``; gradients clipped at 1.0; AdamW (lr 1e-4).

Every timed step starts after a barrier; its time is the longest of the 4 processes'. The steps
of the implementations are interleaved, alternating which goes first, so both see the same
machine load; the first WARMUP steps of each are not counted. Before timing, each model must be
split and sharded the same way (the same FSDP units and parameter placements on a 2 x 2 mesh) or
the workload exits saying the comparison would not be fair. Rank 0 prints one JSON object:
{impl: median seconds per step, "runs": {impl: [seconds...]}, "losses": {impl: [...]}, "norms":
{impl: [gradient norm of each step]}, "built": {impl: what the prepared model is},
"parameters": count}.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import residual_net
import torch
import torch.distributed as dist
from interleaved_steps import interleaved, mean_over_processes, report_and_end
from residual_net import Net
from torch.utils.data import DataLoader, TensorDataset

WIDTH, HIDDEN, DEPTH, BATCH = 512, 1024, 4, 64
DP, TP = 2, 2
LR, MAX_NORM = 1e-4, 1.0
UNFAIR = "the comparison would not be fair"


def new_model() -> Net:
    return residual_net.new_model(WIDTH, HIDDEN, DEPTH)


def split(model: torch.nn.Module, tp_mesh: object) -> None:
    """The tensor-parallel plan, for both: Megatron's column-then-row split of each block."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {"blocks.*.up": ColwiseParallel(), "blocks.*.down": RowwiseParallel()}
    parallelize_module(model, tp_mesh, plan)


def dataset(steps: int) -> TensorDataset:
    """Every batch of the run, for every data-parallel rank (the same on all processes)."""
    rows = steps * DP * BATCH
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(rows, WIDTH, generator=generator)
    return TensorDataset(inputs, torch.randn(rows, WIDTH, generator=generator))


Step = Callable[[], tuple[torch.Tensor, torch.Tensor]]


def make_accel(steps: int) -> tuple[Step, str]:
    from accel_backends import ParallelismConfig, TorchTensorParallelConfig
    from accel_core import Accelerator

    config = ParallelismConfig(
        dp_shard_size=DP,
        tp_size=TP,
        tp_handler=TorchTensorParallelConfig(parallelize_fn=split),
    )
    accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin(accel=True))
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(dataset(steps), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = iter(loader)

    def step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        norm = accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        return loss, norm

    return step, describe(model)


def plugin(accel: bool) -> object:
    if accel:
        from accel_backends import FullyShardedDataParallelPlugin
    else:
        from accelerate.utils import FullyShardedDataParallelPlugin
    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
        reshard_after_forward=True,
    )


def probe_accelerate() -> None:
    """Build Hugging Face Accelerate's Accelerator with the same configuration; it refuses."""
    from accelerate import Accelerator
    from accelerate.utils import ParallelismConfig, TorchTensorParallelConfig

    config = ParallelismConfig(dp_shard_size=DP, tp_size=TP, tp_handler=TorchTensorParallelConfig())
    try:
        accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin(accel=False))
    except (ValueError, RuntimeError, NotImplementedError) as error:
        first = str(error).splitlines()[0]
        raise SystemExit(f"Accelerate refused: {type(error).__name__}: {first}; {UNFAIR}") from None
    raise SystemExit(
        f"Accelerate built {accelerator.distributed_type} over {accelerator.num_processes} "
        f"processes; this workload does not time it: {UNFAIR}"
    )


def _replicated_inputs(module: torch.nn.Module, inputs: tuple, mesh: object) -> tuple:
    from torch.distributed.tensor import DTensor, Replicate

    return tuple(
        DTensor.from_local(x, mesh, [Replicate()], run_check=False)
        if isinstance(x, torch.Tensor) and not isinstance(x, DTensor)
        else x
        for x in inputs
    )


def _local_output(module: torch.nn.Module, output: torch.Tensor, mesh: object) -> torch.Tensor:
    return output.to_local()


def make_raw(steps: int) -> tuple[Step, str]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_module

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp_shard", "tp"))
    model = new_model()
    split(model, mesh["tp"])
    for whole in [*(block.norm for block in model.blocks), model.head]:
        distribute_module(whole, mesh["tp"], input_fn=_replicated_inputs, output_fn=_local_output)
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp_shard"], reshard_after_forward=True)
    fully_shard(model, mesh=mesh["dp_shard"], reshard_after_forward=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    rank = mesh["dp_shard"].get_local_rank()
    mine = [list(range(i * BATCH, (i + 1) * BATCH)) for i in range(rank, steps * DP, DP)]
    batches: Iterator = iter(DataLoader(dataset(steps), batch_sampler=mine))

    def step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        return loss, norm

    return step, describe(model)


def describe(model: torch.nn.Module) -> str:
    """FSDP units, and each parameter's mesh shape and placements (names differ: not shown)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    units = sum(isinstance(m, FSDPModule) for m in model.modules())
    layouts = sorted(
        {
            f"{tuple(p.device_mesh.shape)} {p.placements}"
            if isinstance(p, DTensor)
            else "plain tensor"
            for p in model.parameters()
        }
    )
    return f"{type(model).__name__}, {units} FSDP units, parameters: {'; '.join(layouts)}"


def check(built: dict[str, str]) -> None:
    """Refuse to time models split or sharded unlike raw's (units, meshes, placements)."""
    wanted = f"{DEPTH + 1} FSDP units"
    for impl, text in built.items():
        if wanted not in text or "plain tensor" in text or f"({DP}, {TP})" not in text:
            raise SystemExit(f"{impl} built {text}, not {wanted} on a {DP} x {TP} mesh: {UNFAIR}")
    if len(set(built.values())) > 1:
        raise SystemExit(f"the implementations built different models {built}: {UNFAIR}")


def main() -> None:
    impls = sys.argv[1].split(",")
    steps, warmup = int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    if "accelerate" in impls:
        probe_accelerate()
    runners: dict[str, Step] = {}
    built: dict[str, str] = {}
    # accel forms the process group itself; build it first, raw reuses it.
    for impl in sorted(impls, key=lambda name: name == "raw"):
        if impl not in ("accel", "raw"):
            raise SystemExit(f"unknown implementation {impl!r}; choose accel, raw or accelerate")
        maker = make_raw if impl == "raw" else make_accel
        runners[impl], built[impl] = maker(warmup + steps)
    check(built)
    result = interleaved(
        lambda impl, _: runners[impl](),
        impls,
        steps,
        warmup,
        loss_value=lambda loss: mean_over_processes(float(loss)),
    )
    result["built"] = built
    result["parameters"] = sum(p.numel() for p in new_model().parameters())
    report_and_end(result)


if __name__ == "__main__":
    main()
