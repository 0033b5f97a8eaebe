"""Workload of bench_first_step: from the start of a worker process to the end of its first
training step, with one library. Run under torchrun on 2 CPU processes:
``first_step.py LIBRARY RESULT_FILE``.

LIBRARY is ``accel`` (accel_core.Accelerator), ``accelerate`` (Hugging Face Accelerate, its own
venv's python), ``fabric`` (Lightning Fabric, its own venv's python) or ``raw`` (the loop by hand:
init_process_group, DistributedSampler, DDP). Every library runs the same step: a 256-1024-10 MLP,
AdamW, a batch of 32 from a DataLoader over 512 samples, forward, cross-entropy, backward, step.

The clock starts when the kernel started the process (``/proc/self/stat``'s start time, so the
interpreter's start-up and every import count) and stops after the first ``optimizer.step()``.
Each rank appends ``{"library", "rank", "seconds"}`` as one JSON line to RESULT_FILE.
"""

from __future__ import annotations

import json
import os
import sys
import time

from process_exit import end_process_group


def process_start() -> float:
    """When the kernel started this process, as a ``time.time()`` value (10 ms resolution)."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as kernel:
        boot = next(int(line.split()[1]) for line in kernel if line.startswith("btime"))
    return boot + int(fields[19]) / ticks  # field 22 of the whole line: starttime


def model_and_data():  # torch is imported inside: after the clock started
    import torch
    from torch.utils.data import TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    )
    data = TensorDataset(torch.randn(512, 256), torch.randint(0, 10, (512,)))
    return model, data


def step_with(accelerator_class) -> None:
    """The loop with an ``Accelerator`` (accel's and Accelerate's take the same calls)."""
    import torch
    from torch.utils.data import DataLoader

    accelerator = accelerator_class(cpu=True)
    model, data = model_and_data()
    optimizer = torch.optim.AdamW(model.parameters())
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    x, y = next(iter(loader))
    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
    optimizer.step()


def step_accel() -> None:
    from accel_core import Accelerator

    step_with(Accelerator)


def step_accelerate() -> None:
    from accelerate import Accelerator

    step_with(Accelerator)


def step_fabric() -> None:
    import torch
    from lightning.fabric import Fabric
    from torch.utils.data import DataLoader

    fabric = Fabric(accelerator="cpu", strategy="ddp", devices=2)
    fabric.launch()
    model, data = model_and_data()
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=32, shuffle=True))
    x, y = next(iter(loader))
    fabric.backward(torch.nn.functional.cross_entropy(model(x), y))
    optimizer.step()


def step_raw() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo")
    model, data = model_and_data()
    model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters())
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data, shuffle=True))
    x, y = next(iter(loader))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def main() -> None:
    library, result = sys.argv[1], sys.argv[2]
    started = process_start()
    {"accel": step_accel, "accelerate": step_accelerate, "fabric": step_fabric, "raw": step_raw}[
        library
    ]()
    seconds = time.time() - started
    line = {"library": library, "rank": int(os.environ["RANK"]), "seconds": seconds}
    with open(result, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    end_process_group()  # after the clock (process_exit.py says why)


if __name__ == "__main__":
    main()
