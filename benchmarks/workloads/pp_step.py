"""Time one training step of pipeline parallelism with FSDP2 (pp 2 x dp_shard 2) on 4 CPU
processes, and measure the pipeline's bubble.

Run under torchrun with 4 processes: ``pp_step.py IMPLS STEPS WARMUP``. IMPLS is a comma list of:

- ``accel``: ``Accelerator(parallelism_config=ParallelismConfig(pp_size=2, dp_shard_size=2,
  pp_handler=PipelineParallelConfig(split_fn=split, schedule="1F1B", microbatches=4)),
  fsdp_plugin=...)`` (each ``Block`` its own FSDP unit); the step is ``next(loader)``,
  ``zero_grad``, ``accelerator.forward_backward(model, inputs, mse_loss, targets)``,
  ``accelerator.clip_grad_norm_``, ``optimizer.step()``.
- ``raw``: the same by hand with torch alone: ``init_device_mesh("cpu", (2, 2),
  mesh_dim_names=("pp", "dp_shard"))``, the stage's blocks (and the head on the last stage) in an
  ``nn.Sequential``, ``fully_shard`` on each block and on the stage over ``mesh["dp_shard"]``,
  ``PipelineStage`` + ``Schedule1F1B`` (4 micro-batches, torch's own gradient scaling), AdamW; a
  batch sampler of its data-parallel rank's batches; the step is ``next(loader)``, ``zero_grad``,
  ``schedule.step`` (inputs on the first stage, targets on the last), the gradient norm of the
  whole model (each stage's norm combined over the ``pp`` group) and clipping at 1.0,
  ``optimizer.step()``, and the batch's loss broadcast from the last stage (for logging, as
  accel returns it on every stage).

The model (one seed): ``DEPTH`` residual blocks (LayerNorm, Linear WIDTH -> HIDDEN, GELU, Linear
back) and a Linear head, float32; MSE loss; ``BATCH`` rows per data-parallel rank per step.

Every timed step starts after a barrier; its time is the longest of the 4 processes'. The steps
of the implementations are interleaved, alternating which goes first. After the timed steps,
``BUBBLE_STEPS`` more steps of the raw schedule run with each stage's forward and backward of a
micro-batch timed (``forward_one_chunk``, ``backward_one_chunk``) and the schedule's whole
``step``: a stage's idle fraction is ``1 - busy / schedule step`` (waiting for its neighbour,
and the sends and receives); the theoretical bubble of 1F1B and GPipe is
``(stages - 1) / (microbatches + stages - 1)``. Rank 0 prints one JSON object: {impl: median
seconds per step, "runs", "losses", "norms", "idle": [median idle fraction of each stage],
"theoretical_bubble", "parameters"}.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator

import residual_net
import torch
import torch.distributed as dist
from interleaved_steps import interleaved, report_and_end
from residual_net import Block, Net
from torch.utils.data import DataLoader, TensorDataset

WIDTH, HIDDEN, DEPTH, BATCH = 256, 512, 4, 32
PP, DP, MICROBATCHES = 2, 2, 4
LR, MAX_NORM = 1e-4, 1.0
BUBBLE_STEPS = 6


def new_model() -> Net:
    return residual_net.new_model(WIDTH, HIDDEN, DEPTH)


def stage_modules(model: Net, stage_index: int, num_stages: int) -> list[torch.nn.Module]:
    per = DEPTH // num_stages
    modules: list[torch.nn.Module] = list(model.blocks[stage_index * per : (stage_index + 1) * per])
    if stage_index == num_stages - 1:
        modules.append(model.head)
    return modules


def split(model: torch.nn.Module, stage_index: int, num_stages: int) -> torch.nn.Module:
    return torch.nn.Sequential(*stage_modules(model, stage_index, num_stages))  # type: ignore[arg-type]


def dataset(steps: int) -> TensorDataset:
    rows = steps * DP * BATCH
    inputs = torch.randn(rows, WIDTH, generator=torch.Generator().manual_seed(1))
    targets = torch.randn(rows, WIDTH, generator=torch.Generator().manual_seed(2))
    return TensorDataset(inputs, targets)  # the first rows alike whatever the number of steps


Step = Callable[[], tuple[torch.Tensor, torch.Tensor]]


def make_accel(steps: int) -> tuple[Step, object]:
    from accel_backends import (
        FullyShardedDataParallelPlugin,
        ParallelismConfig,
        PipelineParallelConfig,
    )
    from accel_core import Accelerator

    config = ParallelismConfig(
        pp_size=PP,
        dp_shard_size=DP,
        pp_handler=PipelineParallelConfig(
            split_fn=split, schedule="1F1B", microbatches=MICROBATCHES
        ),
    )
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
        reshard_after_forward=True,
    )
    accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(dataset(steps), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = iter(loader)
    loss_fn = torch.nn.functional.mse_loss

    def step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        loss = accelerator.forward_backward(model, inputs, loss_fn, targets)
        norm = accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        return loss, norm

    return step, None


def make_raw(steps: int) -> tuple[Step, object]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (PP, DP), mesh_dim_names=("pp", "dp_shard"))
    stage_index = mesh["pp"].get_local_rank()
    last = stage_index == PP - 1
    pp_group = mesh["pp"].get_group()
    stage_model = torch.nn.Sequential(*stage_modules(new_model(), stage_index, PP))
    for module in stage_model:
        if isinstance(module, Block):
            fully_shard(module, mesh=mesh["dp_shard"], reshard_after_forward=True)
    fully_shard(stage_model, mesh=mesh["dp_shard"], reshard_after_forward=True)
    optimizer = torch.optim.AdamW(stage_model.parameters(), lr=LR)
    stage = PipelineStage(stage_model, stage_index, PP, torch.device("cpu"), group=pp_group)
    schedule = Schedule1F1B(stage, MICROBATCHES, loss_fn=torch.nn.functional.mse_loss)
    rank = mesh["dp_shard"].get_local_rank()
    mine = [list(range(i * BATCH, (i + 1) * BATCH)) for i in range(rank, steps * DP, DP)]
    batches: Iterator = iter(DataLoader(dataset(steps), batch_sampler=mine))
    parameters = list(stage_model.parameters())

    def step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        losses: list[torch.Tensor] = []
        if stage_index == 0:
            schedule.step(inputs)
        else:
            schedule.step(target=targets, losses=losses)
        loss = torch.stack(losses).mean().double() if last else torch.zeros((), dtype=torch.float64)
        dist.broadcast(loss, group=pp_group, group_src=PP - 1)
        grads = [p.grad for p in parameters if p.grad is not None]
        local = torch.nn.utils.get_total_norm(grads, 2.0).full_tensor().double() ** 2
        dist.all_reduce(local, group=pp_group)
        norm = local.sqrt()
        torch.nn.utils.clip_grads_with_norm_(parameters, MAX_NORM, norm.float())
        optimizer.step()
        return loss, norm

    return step, (stage, schedule)


def time_calls(owner: object, names: tuple[str, ...]) -> list[float]:
    """Wrap the methods ``names`` of ``owner`` with a timer; returns the list the seconds of
    their calls go to."""
    busy: list[float] = []
    for name in names:
        original = getattr(owner, name)

        def timed(*args: object, _original: Callable = original, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                busy.append(time.perf_counter() - start)

        setattr(owner, name, timed)
    return busy


def main() -> None:
    impls = sys.argv[1].split(",")
    steps, warmup = int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    runners: dict[str, Step] = {}
    raw_pipeline = None
    for impl in sorted(impls, key=lambda name: name == "raw"):
        if impl not in ("accel", "raw"):
            raise SystemExit(f"unknown implementation {impl!r}; choose accel or raw")
        total = warmup + steps + (BUBBLE_STEPS if impl == "raw" else 0)
        runners[impl], built = (make_raw if impl == "raw" else make_accel)(total)
        if impl == "raw":
            raw_pipeline = built
    result = interleaved(lambda impl, _: runners[impl](), impls, steps, warmup)
    idle: list[float] = []
    if raw_pipeline is not None:
        stage, schedule = raw_pipeline
        busy = time_calls(stage, ("forward_one_chunk", "backward_one_chunk"))
        whole = time_calls(schedule, ("step",))
        fractions = []
        for _ in range(BUBBLE_STEPS):
            busy.clear()
            whole.clear()
            dist.barrier()
            runners["raw"]()
            fractions.append(1.0 - sum(busy) / sum(whole))
        gathered: list[float | None] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, statistics.median(fractions))
        # ranks 0-1 hold stage 0, ranks 2-3 stage 1 (pp is the outer dimension)
        idle = [statistics.mean(gathered[i * DP : (i + 1) * DP]) for i in range(PP)]  # type: ignore[arg-type]
    result["idle"] = idle
    result["theoretical_bubble"] = (PP - 1) / (MICROBATCHES + PP - 1)
    result["parameters"] = sum(p.numel() for p in new_model().parameters())
    report_and_end(result)


if __name__ == "__main__":
    main()
