"""Saving one model as sharded safetensors, timed in a fresh process; prints one JSON line.

Usage: python save_model_run.py <accel|accelerate|raw> <folder> <full|quick>
The model is a stack of Linear layers with random float32 weights (full: 64 x 2048x2048 with
bias, 1.07 GB; quick: 16 x 1024x1024, 67 MB), saved into 200 MB (quick: 20 MB) shards with:
accel's and Hugging Face Accelerate's ``Accelerator.save_model``,
raw ``safetensors.torch.save_file`` of the same shards plus the index, written by hand.
After one untimed save (which also does the imports), two saves are timed: into a new folder
("fresh"), then into the folder holding the first save ("overwrite"). Dirty pages are flushed
(``os.sync``) before each, so each starts from the same page-cache state; each gives wall
seconds and the CPU seconds of the process (user + system). Then one more save, not
timed, gives the peak RSS growth (sampled every millisecond). The folder is removed at the end.

Just before the fresh save, another save of the same size (untimed) is deleted, as a job that
keeps its last few saves does: the kernel then writes the new files into memory it has just
freed. Without that, the figure measures the VM rather than the library: here the page cache
grows into memory not used recently at 0.4 GB/s, and into memory just freed at 3.8 GB/s (1 GB
with ``dd``, both), and the same save took 0.27 to 2.6 s from one call to the next. The delete
comes after the flush of dirty pages, right before the save: with the flush (seconds) between
them, the VM had often taken the freed memory back by the time the save began, and raw's fresh
save took 0.21 or 0.59 s from one process to the next (0.20 to 0.25 s with this order).
"""

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import torch

SIZES = {"full": (64, 2048, 200 * 10**6), "quick": (16, 1024, 20 * 10**6)}


def build(size: str) -> torch.nn.Module:
    layers, width, _ = SIZES[size]
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.uniform_(-0.05, 0.05, generator=generator)
    return model


def raw_saver(model: torch.nn.Module, limit: int):
    from raw_shards import plan_raw_shards
    from safetensors.torch import save_file

    state = model.state_dict()
    planned = plan_raw_shards(state, limit)
    weight_map = {key: name for name, shard in planned for key in shard}
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}

    def save(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, shard in planned:
            save_file(shard, folder / name, metadata={"format": "pt"})
        text = json.dumps(index, indent=2, sort_keys=True) + "\n"
        (folder / "model.safetensors.index.json").write_text(text)

    return save


def saver(impl: str, model: torch.nn.Module, limit: int):
    if impl == "raw":
        return raw_saver(model, limit)
    if impl == "accel":
        from accel_core import Accelerator
    else:
        from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    return lambda folder: accelerator.save_model(model, folder, max_shard_size=limit)


def rss_growth(action, folder: Path) -> int:
    """Peak resident memory during ``action(folder)`` minus before, sampled every millisecond."""
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    base, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    action(folder)
    done.set()
    sampler.join()
    return max(0, max(peak[0], rss()) - base)


def timed(action, folder: Path, before=None) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of this process (user + system, all threads), of
    ``action(folder)``; dirty pages are flushed first, then ``before()`` runs (untimed)."""
    os.sync()
    if before is not None:
        before()
    wall, cpu = time.perf_counter(), time.process_time()
    action(folder)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    impl, root, size = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    model = build(size)
    save = saver(impl, model, SIZES[size][2])
    save(root / "previous")  # untimed: imports done, and the save that "overwrite" replaces
    save(root / "deleted")
    fresh, fresh_cpu = timed(save, root / "fresh", before=lambda: shutil.rmtree(root / "deleted"))
    overwrite, overwrite_cpu = timed(save, root / "previous")
    files = sorted(p.name for p in (root / "previous").iterdir())
    written = sum(p.stat().st_size for p in (root / "previous").iterdir())
    growth = rss_growth(save, root / "fresh")
    shutil.rmtree(root)
    result = {"fresh_s": fresh, "overwrite_s": overwrite, "files": files, "bytes": written}
    result |= {"fresh_cpu_s": fresh_cpu, "overwrite_cpu_s": overwrite_cpu}
    print(json.dumps({**result, "rss_growth": growth}))


if __name__ == "__main__":
    main()
