"""Steady-state training steps per second of one loop written three ways, on 2 CPU processes.

Run under torchrun: ``training_loop.py MODEL IMPLS ROUNDS STEPS``. MODEL is ``mlp``
(256-1024-1024-10, batch 64 per process) or ``transformer`` (a 2-layer BERT classifier from a
transformers config, hidden 128, sequence 64, batch 16 per process, random weights). IMPLS is a
comma list of ``accel`` (accel_core.Accelerator), ``raw`` (hand-written: DistributedSampler, DDP,
loss.backward()) and ``accelerate`` (Hugging Face Accelerate, run with its own venv's python).

Every implementation runs the same step on the same data: zero_grad, forward, loss, backward,
AdamW step, scheduler step, reading batches from its data loader (epochs restart as needed).
Implementations named together are interleaved round by round (alternating which goes first) so
they see the same machine load. After a warm-up round each, every round is: a barrier, STEPS
steps, a barrier; the figure is STEPS / round time, median over ROUNDS rounds. Rank 0 prints one
JSON object: {impl: steps per second, "rounds": {impl: [steps per second of each round]}}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

SAMPLES_PER_PROCESS_EPOCH = 20


def build(kind: str) -> tuple[torch.nn.Module, TensorDataset, int, Callable]:
    """(model, dataset, batch size per process, loss function(model, batch))."""
    torch.manual_seed(0)
    if kind == "mlp":
        batch = 64
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 10),
        )
        n = batch * 2 * SAMPLES_PER_PROCESS_EPOCH
        data = TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,)))

        def loss(model, batch):
            x, y = batch
            return torch.nn.functional.cross_entropy(model(x), y)

        return model, data, batch, loss
    if kind == "transformer":
        from transformers import BertConfig, BertForSequenceClassification

        batch, length = 16, 64
        config = BertConfig(
            vocab_size=1000,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=256,
            max_position_embeddings=128,
            num_labels=2,
        )
        model = BertForSequenceClassification(config)
        n = batch * 2 * SAMPLES_PER_PROCESS_EPOCH
        data = TensorDataset(torch.randint(0, 1000, (n, length)), torch.randint(0, 2, (n,)))

        def loss(model, batch):
            ids, labels = batch
            return model(input_ids=ids, labels=labels).loss

        return model, data, batch, loss
    raise SystemExit(f"unknown model {kind!r}; choose mlp or transformer")


def forever(loader: DataLoader) -> Iterator:
    while True:
        yield from loader


def optimizer_and_scheduler(model: torch.nn.Module) -> tuple:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return optimizer, scheduler


def library_step(accelerator_class: type, kind: str) -> Callable[[], None]:
    """The quicktour loop with an Accelerator class (ours or Hugging Face's)."""
    model, data, batch, loss_fn = build(kind)
    optimizer, scheduler = optimizer_and_scheduler(model)
    accelerator = accelerator_class()
    model, optimizer, loader, scheduler = accelerator.prepare(
        model, optimizer, DataLoader(data, batch_size=batch), scheduler
    )
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise SystemExit(
            f"{accelerator_class.__module__} did not wrap the model in DDP ({type(model).__name__},"
            f" {accelerator.distributed_type}): the comparison would not be fair. For Accelerate "
            "on CPU set ACCELERATE_USE_CPU=1."
        )
    batches = forever(loader)

    def step() -> None:
        optimizer.zero_grad()
        loss = loss_fn(model, next(batches))
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()

    return step


def raw_step(kind: str) -> Callable[[], None]:
    """The same loop written by hand with torch.distributed."""
    from torch.utils.data.distributed import DistributedSampler

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    model, data, batch, loss_fn = build(kind)
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer, scheduler = optimizer_and_scheduler(model)
    loader = DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, shuffle=False))
    batches = forever(loader)

    def step() -> None:
        optimizer.zero_grad()
        loss = loss_fn(model, next(batches))
        loss.backward()
        optimizer.step()
        scheduler.step()

    return step


def make(impl: str, kind: str) -> Callable[[], None]:
    if impl == "accel":
        from accel_core import Accelerator

        return library_step(Accelerator, kind)
    if impl == "accelerate":
        from accelerate import Accelerator

        return library_step(Accelerator, kind)
    if impl == "raw":
        return raw_step(kind)
    raise SystemExit(f"unknown implementation {impl!r}; choose accel, raw or accelerate")


def timed_round(step: Callable[[], None], steps: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    return steps / (time.perf_counter() - start)


def main() -> None:
    kind, impls = sys.argv[1], sys.argv[2].split(",")
    rounds, steps = int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    # The libraries form the process group themselves; build them first, raw reuses it.
    order = sorted(impls, key=lambda name: name == "raw")
    runners = {impl: make(impl, kind) for impl in order}
    for impl in impls:  # warm-up: allocator, autograd graph, DDP buckets
        timed_round(runners[impl], max(3, steps // 2))
    rates: dict[str, list[float]] = {impl: [] for impl in impls}
    for round_index in range(rounds):
        turn = impls if round_index % 2 == 0 else list(reversed(impls))
        for impl in turn:
            rates[impl].append(timed_round(runners[impl], steps))
    if dist.get_rank() == 0:
        result: dict = {impl: statistics.median(values) for impl, values in rates.items()}
        result["rounds"] = {impl: [round(v, 3) for v in values] for impl, values in rates.items()}
        print(json.dumps(result))


if __name__ == "__main__":
    main()
