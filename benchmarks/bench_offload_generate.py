"""Big-model inference through transformers: ``from_pretrained(device_map="auto")`` with all or half
of the decoder layers offloaded to "disk", then greedy ``generate``, on accel through accel-kit's
``accelerate`` alias (``ACCEL_AS_ACCELERATE=1``, this interpreter's venv) against the same script
on Hugging Face Accelerate (its own venv, same transformers).

The model is a random-weight float32 Llama written with ``save_pretrained`` in 5 safetensors shards
(workloads/offload_generate_make.py: 10 layers, hidden 640, vocabulary 8000, ~244 MB; 4 layers,
hidden 512, ~84 MB with --quick). Each run is a fresh process (workloads/offload_generate.py, which
imports neither library): ``from_pretrained(path, device_map="auto", max_memory={"cpu": budget},
offload_folder=..., dtype=torch.float32)``, one warm-up load then 3 timed (load: their median), then
on 1 thread (``torch.set_num_threads(1)``) a 2-token warm-up ``generate`` and the timed greedy one
of 32 new tokens (``do_sample=False``, ``min_new_tokens`` = ``max_new_tokens``; tokens/s over the
whole call, prompt pass included; also per CPU second of the process, steadier on a loaded
machine). Runs alternate accel/Accelerate, the order flipping every repeat;
figures are medians over 5 runs per library (1 with --quick). The section fails if a run used the
other library (module of the hook on the last layer), if the generated tokens differ between any
two runs, or if the libraries place a different number of layers on disk.

Scenarios:

1. disk-only, warm: a CPU budget that holds only the embeddings (and the reserve the size of the
   head that the device map keeps): every decoder layer, the final norm and the head go to "disk".
   For this checkpoint both libraries (when this was written) read the offloaded weights from the
   safetensors files on every forward pass, writing nothing to the offload folder; here from a
   warm page cache (the files were just written and loaded, and the warm-up ``generate`` read them).
2. disk-only, cold, in the same process right after scenario 1 (imports, kernels and
   ``generate`` already warm): the model is loaded again, from a copy of the checkpoint that this
   process has never read (a library that keeps the first checkpoint's pages mapped would keep
   them in the page cache), the copy's files and its offload folder's are evicted from the page
   cache with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after an ``os.sync()`` (workloads/
   bigmodel_load.py's method: advice any process may give for files it can read, so no root
   needed, and no other file leaves the cache; the kernel keeps dirty pages, hence the sync, and
   pages that a process has mapped), then the same timed ``generate``. The fraction of the
   offloaded weights' pages still cached right after the drop is measured (``mincore``) and must
   be under 5%. Only the first token is cold: that forward pass (the prompt's) reads every
   offloaded weight from the disk, and the pages then stay in the page cache, so the other 31
   tokens run as in scenario 1. The target (the issue's: a run whose files were dropped before
   it) is on the whole call's tokens/s; the first token (1 / seconds from the call to the first
   new token) is shown with its limit, the disk's sequential speed. "Disk" is
   this VM's virtual disk: its host may cache it.
3. cpu+disk split, warm: a CPU budget that holds the embeddings and half of the decoder layers; the
   other half, the norm and the head go to "disk".

Peak RSS during each timed ``generate``: ``/proc/self/clear_refs`` written "5" right before the call
(resets the kernel's peak to the current RSS) and ``VmHWM`` read after it; where that fails,
``ru_maxrss`` (the peak of the whole process, loads included); the row says which. It counts the
whole process (interpreter, torch, transformers, the in-memory weights and the mapped file pages).

Limit for this machine: each forward pass reads every weight once (a decode step's matrix-vector
products are bound by memory): the offloaded bytes (all parameters of the modules on "disk", summed
from the loaded model; they equal the bytes of those tensors in the safetensors headers) and the
in-memory bytes (the other parameters but the input embedding table, of which one row is read).
Measured in each run, medians over all runs of both libraries: the memory bandwidth (bytes / best
of 5 of a 1-thread ``linear`` of one row by a 256 MB float32 weight) and, in scenario 2, the disk
bandwidth (bytes / seconds of reading the copy's offloaded byte ranges once, in file order, with
``readinto`` of up to 16 MB, right after dropping them from the page cache and before loading the
copy). Warm limit: memory bandwidth / bytes per token; cold first-token limit: 1 / (offloaded bytes
/ disk bandwidth + in-memory bytes / memory bandwidth). The rest of the work (attention, norms,
page faults, copies, Python) is left out, so a library stays below the warm limit; the cold one
assumes a single sequential read stream, which reads overlapped with compute or several reads in
flight could beat somewhat. The "fraction of that limit" rows show how close each library gets.
"""

from __future__ import annotations

import shutil
import statistics

from harness import HERE, Context, Row, json_result
from hf_stack import ENVS, OFFLINE, alternate, check_library, differing_tokens_row, medians

TITLE = (
    "Big-model inference through transformers: offloaded generate "
    "(ACCEL_AS_ACCELERATE=1 vs Accelerate)"
)
WORKLOADS = HERE / "workloads"
NEW_TOKENS = 32
MB = 2**20


def _runs(ctx: Context, model: str, budget: int, copy: str | None) -> dict[str, list[dict]]:
    """Alternating runs of workloads/offload_generate.py, warm, then cold on ``copy`` (a copy of
    the checkpoint) unless that is ``None``; each checked for the library it used."""
    repeats = 1 if ctx.quick else 5
    script = str(WORKLOADS / "offload_generate.py")

    def load_and_generate(library: str, python: str, repeat: int) -> dict:
        mode = "warm" if copy is None else "cold"
        folder = str(ctx.scratch / f"offload-{mode}-{library}-{repeat}")
        command = [python, script, model, folder, str(budget), str(NEW_TOKENS), mode]
        command += [] if copy is None else [copy]
        result = json_result(command, env=ENVS[library], timeout=900)
        check_library(library, result["hook"])
        if copy is not None:
            result["cold_first_token_per_s"] = 1 / result["cold_first_token_s"]
        return result

    return alternate(ctx, repeats, load_and_generate)


def _check_same(scenarios: dict[str, dict[str, list[dict]]]) -> list[int]:
    """The tokens every run generated (raises if any two differ, or if the libraries put a
    different number of layers or bytes on disk in a scenario)."""
    first = scenarios["disk"]["accel"][0]
    for scenario, results in scenarios.items():
        reference = results["accel"][0]
        for library, runs in results.items():
            for result in runs:
                for key in ("warm_tokens", "cold_tokens"):
                    if key in result and result[key] != first["warm_tokens"]:
                        raise RuntimeError(
                            f"generated tokens differ: accel {first['warm_tokens']}, {library} "
                            f"({scenario}, {key}) {result[key]}"
                        )
                for key in ("disk_layers", "offloaded_bytes", "in_memory_bytes"):
                    if result[key] != reference[key]:
                        raise RuntimeError(
                            f"{scenario}: {key} differs: accel {reference[key]}, "
                            f"{library} {result[key]}"
                        )
    return first["warm_tokens"]


def _all(results: dict[str, list[dict]], key: str) -> list:
    return [result[key] for runs in results.values() for result in runs]


def _methods(results: dict[str, list[dict]], key: str) -> str:
    return ", ".join(sorted(set(_all(results, key))))


def _fraction(value: float | None, limit: float) -> float | None:
    return None if value is None else value / limit


def _higher(ours: float, theirs: float | None, factor: float) -> bool | None:
    return None if theirs is None else ours >= factor * theirs


def _lower(ours: float, theirs: float | None) -> bool | None:
    return None if theirs is None else ours <= theirs


def _warm_rows(results: dict[str, list[dict]], label: str, factor: float, memory: float) -> list:
    """Load, warm generate, peak RSS, limit and fraction of it for one scenario."""
    first = results["accel"][0]
    offloaded, in_memory = first["offloaded_bytes"], first["in_memory_bytes"]
    limit = memory / (offloaded + in_memory)
    load, hf_load = medians(results, "load_s")
    rate, hf_rate = medians(results, "warm_tokens_per_s")
    cpu_rate, hf_cpu_rate = medians(results, "warm_tokens_per_cpu_s")
    rss, hf_rss = medians(results, "warm_peak_rss")
    return [
        Row(
            f"{label}: from_pretrained load",
            "s",
            load,
            hf_load,
            None,
            "<= 1.0x Accelerate",
            _lower(load, hf_load),
        ),
        Row(
            f"same: greedy generate, {NEW_TOKENS} new tokens, 1 thread, warm page cache",
            "tokens/s",
            rate,
            hf_rate,
            None,
            f">= {factor}x Accelerate",
            _higher(rate, hf_rate, factor),
        ),
        Row(
            "same: tokens per CPU second of the process (process time: less disturbed than the "
            "wall clock by other load on the machine; the run is 1-threaded)",
            "tokens/s",
            cpu_rate,
            hf_cpu_rate,
        ),
        Row(
            f"same: peak RSS of the process during generate "
            f"({_methods(results, 'warm_rss_method')})",
            "MB",
            rss / MB,
            None if hf_rss is None else hf_rss / MB,
            None,
            "<= Accelerate",
            _lower(rss, hf_rss),
        ),
        Row(
            f"same: limit for this machine: {(offloaded + in_memory) / MB:.0f} MB of weights read "
            f"per token ({offloaded / MB:.0f} MB offloaded + {in_memory / MB:.0f} MB in memory) "
            f"at {memory / 1e9:.1f} GB/s (1-thread matrix-vector product from memory)",
            "tokens/s",
            limit,
        ),
        Row(
            "same: fraction of that limit reached",
            "fraction",
            _fraction(rate, limit),
            _fraction(hf_rate, limit),
        ),
    ]


def _cold_rows(results: dict[str, list[dict]], memory: float, disk: float) -> list:
    first = results["accel"][0]
    offloaded, in_memory = first["offloaded_bytes"], first["in_memory_bytes"]
    limit = 1 / (offloaded / disk + in_memory / memory)
    found = _all(results, "cold_cached_after_drop") + _all(results, "disk_cached_after_drop")
    cached = None if None in found else max(found)
    rate, hf_rate = medians(results, "cold_first_token_per_s")
    rss, hf_rss = medians(results, "cold_peak_rss")
    whole, hf_whole = medians(results, "cold_tokens_per_s")
    return [
        Row(
            "disk-only, cold (a fresh load of a copy of the checkpoint, its offloaded weights "
            "dropped from the page cache): first token of the timed generate (the prompt's "
            "forward pass reads every offloaded weight from disk)",
            "tokens/s",
            rate,
            hf_rate,
        ),
        Row(
            f"same: whole generate, {NEW_TOKENS} new tokens (the first cold, the others from the "
            "page cache)",
            "tokens/s",
            whole,
            hf_whole,
            None,
            ">= 1.3x Accelerate",
            _higher(whole, hf_whole, 1.3),
        ),
        Row(
            f"same: peak RSS of the process during generate "
            f"({_methods(results, 'cold_rss_method')})",
            "MB",
            rss / MB,
            None if hf_rss is None else hf_rss / MB,
            None,
            "<= Accelerate",
            _lower(rss, hf_rss),
        ),
        Row(
            "same: offloaded weights' pages still in the page cache right after a drop (most "
            "over the runs, before the generate and before the disk read)",
            "%",
            None if cached is None else 100 * cached,
            None,
            None,
            "< 5% (else not cold)",
            None if cached is None else cached < 0.05,
        ),
        Row(
            f"same: limit for this machine, first token: {offloaded / MB:.0f} MB from disk at "
            f"{disk / 1e6:.0f} MB/s (sequential read of the dropped weights) + "
            f"{in_memory / MB:.0f} MB from memory",
            "tokens/s",
            limit,
        ),
        Row(
            "same: fraction of that limit reached",
            "fraction",
            _fraction(rate, limit),
            _fraction(hf_rate, limit),
        ),
    ]


def run(ctx: Context) -> list[Row]:
    folder = ctx.scratch / "model"
    made = json_result(
        [
            ctx.python,
            str(WORKLOADS / "offload_generate_make.py"),
            str(folder),
            "quick" if ctx.quick else "full",
        ],
        env=OFFLINE,
    )
    copy = ctx.scratch / "model-copy"
    shutil.copytree(folder, copy)
    disk = _runs(ctx, str(folder), made["disk_budget"], str(copy))
    split = _runs(ctx, str(folder), made["split_budget"], None)
    tokens = _check_same({"disk": disk, "split": split})
    memory = statistics.median(_all(disk, "memory_bandwidth") + _all(split, "memory_bandwidth"))
    disk_bandwidth = statistics.median(_all(disk, "disk_bandwidth"))
    layers = made["layers"]
    model = f"{made['bytes'] / MB:.0f} MB float32 model in {made['shards']} shards"
    disk_label = (
        f"disk-only, warm ({disk['accel'][0]['disk_layers']} of {layers} layers on disk, "
        f"{made['disk_budget'] / MB:.0f} MB CPU budget; {model})"
    )
    split_label = (
        f"cpu+disk, warm ({split['accel'][0]['disk_layers']} of {layers} layers on disk, "
        f"{made['split_budget'] / MB:.0f} MB CPU budget)"
    )
    return [
        *_warm_rows(disk, disk_label, 1.5, memory),
        *_cold_rows(disk, memory, disk_bandwidth),
        *_warm_rows(split, split_label, 1.3, memory),
        differing_tokens_row(
            tokens,
            disk["accelerate"][0]["warm_tokens"] if "accelerate" in disk else None,
            "generated tokens differing from Accelerate's (the section fails unless every run of "
            "both libraries, warm and cold, generates the same tokens)",
        ),
    ]
