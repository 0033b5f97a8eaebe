"""``from_pretrained(device_map="auto")`` with disk offload, then timed greedy ``generate``, warm
and (with ``cold``) right after the offloaded weights are dropped from the page cache; the same file
runs under Hugging Face Accelerate and under accel's ``accelerate`` alias (it imports neither).

Usage: python offload_generate.py <model> <offload_root> <cpu_budget_bytes> <new_tokens> warm
       python offload_generate.py <model> <offload_root> <cpu_budget_bytes> <new_tokens> cold <copy>
On 1 thread (``torch.set_num_threads(1)``):

- loads: one warm-up load, then 3 timed, each into a fresh offload folder under ``offload_root``,
  with ``max_memory={"cpu": budget}`` and ``dtype=torch.float32`` (ecosystem_offload.py's
  ``load``); ``load_s`` is their median. The last load is used below.
- warm: a 2-token warm-up ``generate``, then the timed greedy one of ``new_tokens`` tokens
  (``do_sample=False``, ``min_new_tokens`` = ``max_new_tokens``): tokens per second over the whole
  call, and the seconds from the call to its first new token (the prompt's forward pass; a
  streamer's ``put`` stamps each token).
- cold (only with ``cold``, after the warm one): ``copy`` is a copy of the checkpoint that this
  process has not read (a library may keep the pages of the first one mapped, and the kernel does
  not evict mapped pages). Its files are evicted from the page cache (``os.sync()``, then
  bigmodel_load.py's ``drop_from_page_cache``: ``posix_fadvise(POSIX_FADV_DONTNEED)``, no root
  needed, only these files' pages go; the sync writes back dirty pages, which it would keep) and
  ``disk_bandwidth`` measured (below); the warm model is freed, the copy loaded (offload folder
  ``cold``), its files and the offload folder's evicted again, and the same timed ``generate``
  run. ``cold_cached_after_drop`` is the fraction of the offloaded weights' pages still in the
  page cache right after that drop (``mincore`` on a fresh read-only map, which reads nothing):
  near 0 means they come from the disk. Only the first token is cold: its forward pass reads every
  offloaded weight from the disk and leaves the pages in the page cache for the later tokens.
- peak RSS during each timed ``generate``: ``/proc/self/clear_refs`` is written "5" (resets the
  peak to the current RSS) right before the call and ``VmHWM`` of ``/proc/self/status`` read after
  it; if the write fails, ``ru_maxrss`` (the peak of the whole process, loads included).
  ``rss_method`` says which.
- for the limit: the bytes of weights each forward pass reads, offloaded (every parameter of a
  module the device map sends to "disk") and in memory (the other parameters but the input
  embedding table, of which one row is read); ``offloaded_file_bytes``: the bytes of the offloaded
  parameters' ranges in the checkpoint's safetensors headers, plus any file in the offload folder;
  ``memory_bandwidth``: bytes per second of a 1-thread ``linear`` of one row by a 256 MB float32
  weight (a decode step's matrix-vector product streams its weight from memory; best of 5); with
  ``cold``, ``disk_bandwidth``: bytes per second of reading the copy's offloaded byte ranges once,
  in file order, right after dropping them (``disk_cached_after_drop``: what stayed cached).

Prints one JSON line: the median load seconds, the number of decoder layers on "disk", the module
of the hook on the last layer, the byte counts and bandwidths above, and for each timed
``generate`` (keys prefixed ``warm_``/``cold_``): tokens per second, first-token seconds, the
generated token ids, the peak RSS and the RSS before the call (bytes) and ``rss_method``.
"""

import ctypes
import json
import mmap
import os
import resource
import statistics
import struct
import sys
import time
from pathlib import Path

import torch
from transformers.generation.streamers import BaseStreamer

sys.path.insert(0, str(Path(__file__).parent))
from bigmodel_load import drop_from_page_cache
from ecosystem_offload import LOADS, PROMPT, disk_layers, generate, load, timed_loads

CHUNK = 16 * 2**20


class TokenTimes(BaseStreamer):
    """``perf_counter`` at each ``put``: the prompt first, then each new token."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def reset_peak_rss() -> str:
    """Reset the kernel's peak RSS of this process to its current RSS; the method used."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return "VmHWM after clear_refs"
    except OSError:
        return "ru_maxrss (whole process: clear_refs failed)"


def status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` in bytes (``None`` where there is none)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss(method: str) -> int:
    if method.startswith("VmHWM"):
        return status_bytes("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def timed_generate(model, new_tokens: int) -> dict:
    stamps = TokenTimes()
    rss_before = status_bytes("VmRSS")
    method = reset_peak_rss()
    cpu_start = time.process_time()
    start = time.perf_counter()
    out = generate(model, new_tokens, streamer=stamps)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    peak = peak_rss(method)
    tokens = out[0, len(PROMPT[0]) :].tolist()
    return {
        "tokens_per_s": len(tokens) / seconds,
        "tokens_per_cpu_s": len(tokens) / cpu_seconds,
        "first_token_s": stamps.times[1] - start,
        "tokens": tokens,
        "peak_rss": peak,
        "rss_before": rss_before,
        "rss_method": method,
    }


def on_disk(device_map: dict, name: str) -> bool:
    """Whether the device map sends parameter (or module) ``name`` to "disk" (the longest map
    entry that is ``name`` or a prefix of it decides)."""
    owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    return device_map[max(owners, key=len)] == "disk"


def weight_bytes(model) -> tuple[int, int]:
    """Bytes of parameters read per forward pass: (offloaded, in memory but the input embedding)."""
    embedding = model.get_input_embeddings().weight
    offloaded = in_memory = 0
    for name, param in model.named_parameters():
        size = param.numel() * param.element_size()
        if on_disk(model.hf_device_map, name):
            offloaded += size
        elif param is not embedding:
            in_memory += size
    return offloaded, in_memory


def offloaded_ranges(model, model_dir: str, offload: Path) -> dict[Path, list[tuple[int, int]]]:
    """Where the offloaded weights lie: the byte ranges of the offloaded parameters in the
    checkpoint's safetensors files (from their headers), and every file of the offload folder
    (whole) in case the library wrote some there."""
    names = {n for n, _ in model.named_parameters() if on_disk(model.hf_device_map, n)}
    ranges: dict[Path, list[tuple[int, int]]] = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, info in header.items():
            if name in names:
                start, end = info["data_offsets"]
                ranges.setdefault(path, []).append((8 + length + start, 8 + length + end))
    for path in sorted(offload.glob("*")):
        if path.is_file():
            ranges[path] = [(0, path.stat().st_size)]
    return ranges


def memory_bandwidth() -> float:
    """Bytes per second of a 1-thread ``linear`` of one row by a 256 MB float32 weight."""
    weight = torch.full((8192, 8192), 0.5)
    row = torch.ones(1, 8192)
    torch.nn.functional.linear(row, weight)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        torch.nn.functional.linear(row, weight)
        times.append(time.perf_counter() - start)
    return weight.numel() * weight.element_size() / min(times)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def cached_pages(libc, path: Path) -> list[int] | None:
    """Per page of ``path``: 1 if it is in the page cache (``mincore`` on a fresh read-only shared
    map, which faults nothing in), else 0; ``None`` where that fails."""
    size = path.stat().st_size
    if size == 0:
        return []
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == ctypes.c_void_p(-1).value:
            return None
        try:
            vector = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
            if libc.mincore(address, size, vector) != 0:
                return None
            return [flag & 1 for flag in vector]
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def cached_fraction(ranges: dict[Path, list[tuple[int, int]]]) -> float | None:
    """The fraction of the pages of these byte ranges that are in the page cache (``None`` where
    ``mincore`` is not available)."""
    try:
        libc = _libc()
    except (OSError, AttributeError):
        return None
    cached = total = 0
    for path, spans in ranges.items():
        pages = cached_pages(libc, path)
        if pages is None:
            return None
        for start, end in spans:
            if end > start:
                first, last = start // mmap.PAGESIZE, (end - 1) // mmap.PAGESIZE
                cached += sum(pages[first : last + 1])
                total += last + 1 - first
    return cached / total if total else None


def drop(*folders: str) -> None:
    """Evict these folders' files from the page cache, after writing back any dirty pages (a
    freshly written file's pages are dirty, and ``POSIX_FADV_DONTNEED`` leaves those)."""
    os.sync()
    drop_from_page_cache(*folders)


def read_bandwidth(ranges: dict[Path, list[tuple[int, int]]]) -> float:
    """Bytes per second of reading these byte ranges once, in file order (``readinto`` of up to
    16 MB at a time)."""
    buffer = memoryview(bytearray(CHUNK))
    done = 0
    start = time.perf_counter()
    for path, spans in ranges.items():
        with open(path, "rb", buffering=0) as handle:
            for first, end in sorted(spans):
                handle.seek(first)
                left = end - first
                while left > 0:
                    count = handle.readinto(buffer[: min(left, CHUNK)])
                    if not count:
                        break
                    done += count
                    left -= count
    return done / (time.perf_counter() - start)


def main() -> None:
    model_dir, root = sys.argv[1], Path(sys.argv[2])
    budget, new_tokens, mode = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.set_num_threads(1)
    model, times = timed_loads(model_dir, root, budget)
    result = {}
    with torch.no_grad():
        generate(model, 2)
        for key, value in timed_generate(model, new_tokens).items():
            result[f"warm_{key}"] = value
    ranges = offloaded_ranges(model, model_dir, root / f"timed-{LOADS - 1}")
    if mode == "cold":
        # the copy's offloaded weights, never read by this process: first the disk's bandwidth
        copy = sys.argv[6]
        on_copy = offloaded_ranges(model, copy, root / "cold")
        drop(copy)
        result["disk_cached_after_drop"] = cached_fraction(on_copy)
        result["disk_bandwidth"] = read_bandwidth(on_copy)
        model = None
        model = load(copy, root / "cold", budget)
        model.eval()
        on_copy = offloaded_ranges(model, copy, root / "cold")
        drop(copy, str(root / "cold"))
        result["cold_cached_after_drop"] = cached_fraction(on_copy)
        with torch.no_grad():
            for key, value in timed_generate(model, new_tokens).items():
                result[f"cold_{key}"] = value
    offloaded, in_memory = weight_bytes(model)
    hook = getattr(model.model.layers[-1], "_hf_hook", None)
    result.update(
        {
            "load_s": statistics.median(times),
            "disk_layers": disk_layers(model),
            "layers": model.config.num_hidden_layers,
            "hook": f"{type(hook).__module__}.{type(hook).__qualname__}",
            "offloaded_bytes": offloaded,
            "offloaded_file_bytes": sum(e - s for spans in ranges.values() for s, e in spans),
            "in_memory_bytes": in_memory,
            "memory_bandwidth": memory_bandwidth(),
        }
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
