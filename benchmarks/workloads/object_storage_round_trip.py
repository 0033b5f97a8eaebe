"""Workload of bench_object_storage: one process saves and loads a training state at an S3 URL
(the server and credentials come from the environment), interleaved with fsspec's own ``put`` /
``get`` of the same files, and prints the medians as one JSON line.

argv: ``MILLIONS_OF_PARAMETERS REPEATS SCRATCH_DIR``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import fsspec
import torch

from accel_core import Accelerator


def timed(action, *args, **kwargs) -> float:
    start = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    millions, repeats, scratch = float(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    width = int((millions * 1e6 / 4) ** 0.5)
    accelerator = Accelerator()
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(4)))
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.ones(1, width)).sum().backward()
    optimizer.step()
    local = scratch / "local"
    accelerator.save_state(local)  # the bytes fsspec moves by hand: the same files
    size = sum(p.stat().st_size for p in local.iterdir())
    fs = fsspec.filesystem("s3")
    fs.mkdir("bench-bucket")
    figures: dict[str, list[float]] = {"save": [], "put": [], "load": [], "get": []}
    for index in range(repeats + 1):  # the first round warms up (connections, allocations)
        url = f"s3://bench-bucket/accel/{index}"
        raw = f"bench-bucket/raw/{index}"
        save = timed(accelerator.save_state, url)
        put = timed(fs.put, str(local), raw, recursive=True)
        load = timed(accelerator.load_state, url)
        get = timed(fs.get, raw, str(scratch / f"fetched_{index}"), recursive=True)
        if index:
            for name, value in zip(figures, (save, put, load, get), strict=True):
                figures[name].append(value)
    result = {name: statistics.median(values) for name, values in figures.items()}
    print(json.dumps({**result, "bytes": size, "rounds": figures}))


if __name__ == "__main__":
    main()
