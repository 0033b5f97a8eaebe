"""Time ``save_state`` / ``load_state`` of a ~500 MB training state on 2 CPU processes (gloo).

Run under torchrun with 2 processes: ``checkpoint_state.py IMPLS REPEATS FOLDER``. IMPLS is a
comma list of ``accel`` (accel_core.Accelerator), ``raw`` (rank 0 ``torch.save``s the DDP model's
and the optimizer's state dicts, then a barrier; loading, every rank ``torch.load``s both and
calls ``load_state_dict``, then a barrier) and ``accelerate`` (Hugging Face Accelerate, run with
its own venv's python and ``ACCELERATE_USE_CPU=1``).

The state: an MLP of 10 Linear(2048, 2048) layers (42M float32 parameters, 168 MB) in DDP and
AdamW after one step (exp_avg and exp_avg_sq, 336 MB), 504 MB in all. Each implementation has its
own copy, built from the same seed.

Every timed call starts after a barrier; its time is the longest of the two processes' (the
training loop waits for the slowest rank). Implementations named together are interleaved repeat
by repeat, alternating which goes first, so they see the same machine load. Each save goes into a
fresh folder under FOLDER, removed after the call outside the timed region; the first call of each
measurement is a warm-up and not counted. The loads read the checkpoint the last save of the same
implementation wrote (from the page cache), into the objects that saved it ("load", a reload in
the same process: the optimizer has state) and into newly built ones ("fresh_load", the first
load of a resumed run: the optimizer has none; building them is not timed). accel also times
``save_state(async_save=True)``: the call's return ("blocked") and the time until
``wait_for_checkpoint()`` returns ("total").

Rank 0 prints one JSON object: {impl: {"save": s, "load": s, "fresh_load": s[, "async_blocked": s,
"async_total": s]}} with medians, plus "bytes": the size of accel's checkpoint folder and
"runs": every timed value. The last checkpoint of each implementation stays in FOLDER/IMPL/loaded
(the caller deletes FOLDER).

``checkpoint_state.py first IMPL CHECKPOINT`` is a resumed run's first load, in new processes:
build the model and optimizer (no step yet), time one ``load_state`` of CHECKPOINT (raw: the two
``torch.load`` + ``load_state_dict``), print {"first_load": s}. Nothing of this memory was used
before in these processes, so every byte loaded lands in pages the kernel must first provide.
"""

from __future__ import annotations

import functools
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

LAYERS, WIDTH = 10, 2048


def build() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.optim.Optimizer]]:
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    return model, lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4)


def one_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, backward: Callable) -> None:
    """One step, so the optimizer has exp_avg / exp_avg_sq for every parameter."""
    optimizer.zero_grad()
    backward(model(torch.randn(4, WIDTH)).square().mean())
    optimizer.step()


class Impl:
    """save(folder) and load(folder) of one implementation; async_save only for accel."""

    def save(self, folder: Path) -> None:
        raise NotImplementedError

    def load(self, folder: Path) -> None:
        raise NotImplementedError

    def fresh(self) -> Callable[[Path], None]:
        """A load into newly built objects (an optimizer without state), as the first load of a
        resumed run is; building them is not timed."""
        raise NotImplementedError


class Library(Impl):
    def __init__(self, accelerator_class: type) -> None:
        model, make_optimizer = build()
        self.accelerator = accelerator_class()
        self.model, self.optimizer = self.accelerator.prepare(model, make_optimizer(model))
        if not isinstance(self.model, torch.nn.parallel.DistributedDataParallel):
            raise SystemExit(
                f"{accelerator_class.__module__} did not wrap the model in DDP: the comparison "
                "would not be fair. For Accelerate on CPU set ACCELERATE_USE_CPU=1."
            )
        one_step(self.model, self.optimizer, self.accelerator.backward)

    def save(self, folder: Path) -> None:
        self.accelerator.save_state(str(folder))

    def load(self, folder: Path) -> None:
        self.accelerator.load_state(str(folder))

    def fresh(self) -> Callable[[Path], None]:
        self.built = None
        load, self.built = fresh_library_load(type(self.accelerator))
        return load

    def async_save(self, folder: Path) -> float:
        """Seconds until ``save_state(async_save=True)`` returned; then waits for the write."""
        start = time.perf_counter()
        self.accelerator.save_state(str(folder), async_save=True)
        return time.perf_counter() - start

    def wait(self) -> None:
        self.accelerator.wait_for_checkpoint()


class Raw(Impl):
    def __init__(self) -> None:
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        model, make_optimizer = build()
        self.model = torch.nn.parallel.DistributedDataParallel(model)
        self.optimizer = make_optimizer(self.model)
        one_step(self.model, self.optimizer, lambda loss: loss.backward())

    def save(self, folder: Path) -> None:
        if dist.get_rank() == 0:
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(self.model.state_dict(), folder / "model.pt")
            torch.save(self.optimizer.state_dict(), folder / "optimizer.pt")
        dist.barrier()

    def load(self, folder: Path) -> None:
        self.model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu"))
        self.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location="cpu"))
        dist.barrier()

    def fresh(self) -> Callable[[Path], None]:
        self.built = None
        load, self.built = fresh_raw_load()
        return load


def fresh_library_load(accelerator_class: type) -> tuple[Callable[[Path], None], object]:
    """The ``load_state`` call into a newly built accelerator, model and optimizer, and those
    objects (the caller keeps them alive)."""
    accelerator = accelerator_class()
    model, make_optimizer = build()
    built = accelerator.prepare(model, make_optimizer(model))
    return (lambda folder: accelerator.load_state(str(folder))), (accelerator, built)


def fresh_raw_load() -> tuple[Callable[[Path], None], object]:
    """The raw load into a newly built DDP model and optimizer, and those objects (the caller
    keeps them alive)."""
    model, make_optimizer = build()
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = make_optimizer(model)

    def load(folder: Path) -> None:
        model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu"))
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location="cpu"))
        dist.barrier()

    return load, (model, optimizer)


def accelerator_class(impl: str) -> type:
    if impl == "accel":
        from accel_core import Accelerator

        return Accelerator
    if impl == "accelerate":
        from accelerate import Accelerator

        return Accelerator
    raise SystemExit(f"unknown implementation {impl!r}; choose accel, raw or accelerate")


def make(impl: str) -> Impl:
    return Raw() if impl == "raw" else Library(accelerator_class(impl))


def first_load(impl: str, checkpoint: Path) -> None:
    """One load of ``checkpoint`` into newly built objects of new processes; rank 0 prints
    {"first_load": s}."""
    torch.set_num_threads(1)
    if impl == "raw":
        dist.init_process_group("gloo")
        load, _built = fresh_raw_load()
    else:
        load, _built = fresh_library_load(accelerator_class(impl))
    seconds = timed(functools.partial(load, checkpoint))
    if dist.get_rank() == 0:
        print(json.dumps({"first_load": seconds}))
    dist.barrier()
    dist.destroy_process_group()


def slowest(seconds: float) -> float:
    """The longest of every process's ``seconds``."""
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


def timed(action: Callable[[], object]) -> float:
    dist.barrier()
    start = time.perf_counter()
    action()
    return slowest(time.perf_counter() - start)


def remove(folder: Path) -> None:
    """Delete ``folder`` (rank 0), outside the timed region; every process waits for it."""
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(folder, ignore_errors=True)
    dist.barrier()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    if sys.argv[1] == "first":
        first_load(sys.argv[2], Path(sys.argv[3]))
        return
    impls, repeats, root = sys.argv[1].split(","), int(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    # The libraries form the process group themselves; build them first, raw reuses it.
    runners = {impl: make(impl) for impl in sorted(impls, key=lambda name: name == "raw")}
    runs: dict[str, dict[str, list[float]]] = {impl: {} for impl in impls}

    def record(impl: str, measure: str, index: int, seconds: float) -> None:
        if index > 0:  # the first call is the warm-up
            runs[impl].setdefault(measure, []).append(seconds)

    kept = {impl: root / impl / "loaded" for impl in impls}
    for index in range(repeats + 1):
        for impl in impls if index % 2 == 0 else impls[::-1]:
            folder = kept[impl] if index == repeats else root / impl / f"save_{index}"
            record(impl, "save", index, timed(functools.partial(runners[impl].save, folder)))
            if index < repeats:
                remove(folder)
    for index in range(repeats + 1):
        for impl in impls if index % 2 == 0 else impls[::-1]:
            record(impl, "load", index, timed(functools.partial(runners[impl].load, kept[impl])))
    for index in range(repeats + 1):
        for impl in impls if index % 2 == 0 else impls[::-1]:
            load = runners[impl].fresh()
            record(impl, "fresh_load", index, timed(functools.partial(load, kept[impl])))
    result: dict = {}
    if "accel" in impls:
        result["bytes"] = folder_bytes(kept["accel"])
        accel = runners["accel"]
        for index in range(repeats + 1):
            folder = root / "accel" / f"async_{index}"
            dist.barrier()
            start = time.perf_counter()
            blocked = accel.async_save(folder)
            accel.wait()
            total = time.perf_counter() - start
            record("accel", "async_blocked", index, slowest(blocked))
            record("accel", "async_total", index, slowest(total))
            remove(folder)
    dist.barrier()
    for impl, measures in runs.items():
        result[impl] = {measure: statistics.median(values) for measure, values in measures.items()}
    result["runs"] = {
        impl: {measure: [round(v, 4) for v in values] for measure, values in measures.items()}
        for impl, measures in runs.items()
    }
    if dist.get_rank() == 0:
        print(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
