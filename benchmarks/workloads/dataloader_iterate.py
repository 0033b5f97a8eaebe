"""Iterate a prepared data loader on every process and time it; run under torchrun.

Usage: ``python -m torch.distributed.run --nproc_per_node 2 dataloader_iterate.py IMPL MODE
SAMPLES BATCH REPEATS`` where IMPL is ``accel`` (accel_core.prepare_data_loader), ``accelerate``
(Hugging Face Accelerate's, run with its venv's python) or ``raw`` (a DataLoader with a
DistributedSampler), and MODE is ``shard`` or ``dispatch`` (main process reads and broadcasts).
Rank 0 prints one JSON line: its fastest epoch in wall seconds and in CPU seconds of this process
(the machine is shared; minima are the least disturbed measures of loader overhead) and the
number of batches per epoch.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def build(impl: str, mode: str, dataset: TensorDataset, batch: int) -> tuple[object, torch.device]:
    device = torch.device("cpu")
    if impl == "raw":
        if mode != "shard":
            raise SystemExit("raw PyTorch has no dispatching loader")
        dist.init_process_group("gloo")
        sampler = DistributedSampler(dataset, shuffle=False)
        return DataLoader(dataset, batch_size=batch, sampler=sampler), device
    if impl == "accel":
        from accel_core.data_loader import prepare_data_loader
        from accel_ops import PartialState
    else:
        from accelerate import PartialState
        from accelerate.data_loader import prepare_data_loader
    state = PartialState(cpu=True)
    loader = DataLoader(dataset, batch_size=batch)
    prepared = prepare_data_loader(
        loader,
        device=state.device,
        put_on_device=True,
        dispatch_batches=mode == "dispatch",
    )
    return prepared, state.device


def main() -> None:
    impl, mode = sys.argv[1], sys.argv[2]
    samples, batch, repeats = (int(value) for value in sys.argv[3:6])
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    dataset = TensorDataset(
        torch.randn(samples, 32, generator=generator), torch.randint(0, 10, (samples,))
    )
    loader, device = build(impl, mode, dataset, batch)
    times, cpu_times = [], []
    batches = 0
    for epoch in range(repeats + 1):  # the first epoch warms up
        if impl == "raw":
            loader.sampler.set_epoch(epoch)
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        batches = 0
        for features, labels in loader:
            if impl == "raw":
                features, labels = features.to(device), labels.to(device)
            batches += 1
        cpu = time.process_time() - cpu_start
        dist.barrier()
        if epoch:
            times.append(time.perf_counter() - start)
            cpu_times.append(cpu)
    if dist.get_rank() == 0:
        result = {"epoch_s": min(times), "cpu_s": min(cpu_times), "batches": batches}
        print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
