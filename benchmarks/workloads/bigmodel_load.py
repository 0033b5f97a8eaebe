"""One big-model measurement in a fresh process; prints one JSON line.

Usage: python bigmodel_load.py <accel|accelerate|raw> <cpu|offload> <checkpoint> <offload_dir>
       <full|quick> <budget_bytes> [prefetch]
Reports seconds to build the skeleton, to load (and dispatch) the weights, the first forward, the
median of three more forwards, and, with offload, the median of three forwards each preceded by
dropping the checkpoint and offload files from the page cache (weights then come from the disk);
the peak RSS growth during the load and over the whole run (psutil, sampled every millisecond),
bytes written to the offload folder and an output checksum.
"""

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).parent))
from bigmodel_make import config_for


def drop_from_page_cache(*folders: str) -> None:
    """Evict these files' pages from the page cache (only theirs: posix_fadvise DONTNEED)."""
    for folder in folders:
        for path in Path(folder).glob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


class PeakRSS:
    def __init__(self) -> None:
        self.process = psutil.Process()
        self.base = self.process.memory_info().rss
        self.peak = self.base
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.001)

    def growth(self) -> int:
        self.peak = max(self.peak, self.process.memory_info().rss)
        return self.peak - self.base


def main() -> None:
    impl, mode, checkpoint, offload_dir, size, budget = sys.argv[1:7]
    prefetch = len(sys.argv) > 7 and sys.argv[7] == "prefetch"
    from transformers import LlamaForCausalLM

    config = config_for(size)
    ids = torch.randint(0, config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(0))
    whole = PeakRSS()
    start = time.perf_counter()
    if impl == "raw":
        with torch.device("meta"):
            model = LlamaForCausalLM(config)
    elif impl == "accel":
        from accel_bigmodel import init_empty_weights, load_checkpoint_and_dispatch

        with init_empty_weights():
            model = LlamaForCausalLM(config)
    else:
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch

        with init_empty_weights():
            model = LlamaForCausalLM(config)
    model.eval()
    built = time.perf_counter()
    load = PeakRSS()
    if impl == "raw":
        from safetensors.torch import load_file

        state = {}
        for shard in sorted(Path(checkpoint).glob("*.safetensors")):
            state.update(load_file(shard))
        model.load_state_dict(state, assign=True, strict=False)
        rotary = model.model.rotary_emb
        model.model.rotary_emb = type(rotary)(config=config)
    else:
        kwargs = {"device_map": {"": "cpu"}}
        if mode == "offload":
            kwargs = {
                "device_map": "auto",
                "max_memory": {"cpu": int(budget)},
                "offload_folder": offload_dir,
            }
            if prefetch:
                kwargs["prefetch"] = True
        model = load_checkpoint_and_dispatch(
            model, checkpoint, no_split_module_classes=["LlamaDecoderLayer"], **kwargs
        )
    loaded = time.perf_counter()
    load_growth = load.growth()
    load.stop.set()
    with torch.no_grad():
        logits = model(ids).logits
        first = time.perf_counter()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - t0)
        cold = []
        for _ in range(3 if mode == "offload" else 0):
            drop_from_page_cache(checkpoint, offload_dir)
            t0 = time.perf_counter()
            model(ids)
            cold.append(time.perf_counter() - t0)
    written = (
        sum(
            p.stat().st_size
            for p in Path(offload_dir).glob("*")
            if p.is_file() and p.suffix == ".dat"
        )
        if os.path.isdir(offload_dir)
        else 0
    )
    print(
        json.dumps(
            {
                "build_s": built - start,
                "load_s": loaded - built,
                "first_forward_s": first - loaded,
                "to_first_output_s": first - start,
                "forward_s": statistics.median(times),
                "cold_forward_s": statistics.median(cold) if cold else None,
                "load_rss_growth": load_growth,
                "rss_growth": whole.growth(),
                "offload_bytes": written,
                "checksum": float(logits.double().sum()),
                "devices": sorted(
                    {str(v) for v in getattr(model, "hf_device_map", {"": "cpu"}).values()}
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
