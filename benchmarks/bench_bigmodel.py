"""Big-model inference: loading a sharded safetensors checkpoint, in memory and with disk offload.

A random-weight Llama (~1.9 GB float32, 4 shards; ~170 MB with --quick) is written to the scratch
folder, then each measurement runs in a fresh process (workloads/bigmodel_load.py): accel,
Hugging Face Accelerate and raw PyTorch (safetensors ``load_file`` and
``load_state_dict(assign=True)`` on a meta skeleton). The page cache is warm for every run,
except in the "files dropped from the page cache" rows, where the checkpoint and offload files
(only those) are evicted with posix_fadvise before each forward pass, so offloaded weights come
from the disk.
"""

from __future__ import annotations

from harness import HERE, Context, Row, json_result

TITLE = "Big-model inference (accel-bigmodel)"
MB = 2**20


def _run(ctx: Context, python: str, impl: str, mode: str, name: str, budget: int, prefetch=False):
    command = [
        python,
        str(HERE / "workloads" / "bigmodel_load.py"),
        impl,
        mode,
        str(ctx.scratch / "ckpt"),
        str(ctx.scratch / f"offload-{name}"),
        "quick" if ctx.quick else "full",
        str(budget),
    ]
    if prefetch:
        command.append("prefetch")
    return json_result(command, timeout=900)


def run(ctx: Context) -> list[Row]:
    size = "quick" if ctx.quick else "full"
    made = json_result(
        [ctx.python, str(HERE / "workloads" / "bigmodel_make.py"), str(ctx.scratch / "ckpt"), size]
    )
    budget = (100 if ctx.quick else 500) * MB
    ours = _run(ctx, ctx.python, "accel", "cpu", "accel-cpu", budget)
    raw = _run(ctx, ctx.python, "raw", "cpu", "raw-cpu", budget)
    hf = _run(ctx, ctx.hf_python, "accelerate", "cpu", "hf-cpu", budget) if ctx.hf_python else None
    off = _run(ctx, ctx.python, "accel", "offload", "accel-off", budget)
    pre = _run(ctx, ctx.python, "accel", "offload", "accel-pre", budget, prefetch=True)
    hf_off = (
        _run(ctx, ctx.hf_python, "accelerate", "offload", "hf-off", budget)
        if ctx.hf_python
        else None
    )

    def get(result, key, scale=1.0):
        return None if result is None else result[key] / scale

    limit = (budget + made["largest_shard"]) / MB
    rows = [
        Row(
            "weight loading, all on CPU",
            "s",
            ours["load_s"],
            get(hf, "load_s"),
            raw["load_s"],
            "<= 1.5x raw",
            ours["load_s"] <= 1.5 * raw["load_s"],
        ),
        Row("skeleton build", "s", ours["build_s"], get(hf, "build_s"), raw["build_s"], "", None),
        Row(
            "time to first output (build + load + forward), CPU",
            "s",
            ours["to_first_output_s"],
            get(hf, "to_first_output_s"),
            raw["to_first_output_s"],
            "<= 0.6x Accelerate",
            None if hf is None else ours["to_first_output_s"] <= 0.6 * hf["to_first_output_s"],
        ),
        Row(
            "peak RSS growth, CPU run",
            "MB",
            ours["rss_growth"] / MB,
            get(hf, "rss_growth", MB),
            raw["rss_growth"] / MB,
            "<= Accelerate",
            None if hf is None else ours["rss_growth"] <= hf["rss_growth"],
        ),
        Row(
            f"load with {budget // MB} MB CPU budget + disk offload",
            "s",
            off["load_s"],
            get(hf_off, "load_s"),
            None,
            "<= 0.4x Accelerate",
            None if hf_off is None else off["load_s"] <= 0.4 * hf_off["load_s"],
        ),
        Row(
            "peak RSS growth during offloaded load",
            "MB",
            off["load_rss_growth"] / MB,
            get(hf_off, "load_rss_growth", MB),
            None,
            f"<= budget + largest shard ({limit:.0f} MB)",
            off["load_rss_growth"] / MB <= limit,
        ),
        Row(
            "peak RSS growth, offloaded run (load + 3 forwards)",
            "MB",
            off["rss_growth"] / MB,
            get(hf_off, "rss_growth", MB),
            None,
            "",
            None,
        ),
        Row(
            "bytes written to the offload folder",
            "MB",
            off["offload_bytes"] / MB,
            get(hf_off, "offload_bytes", MB),
            None,
            "0 (safetensors source)",
            off["offload_bytes"] == 0,
        ),
        Row(
            "offloaded forward pass",
            "s",
            off["forward_s"],
            get(hf_off, "forward_s"),
            None,
            "<= Accelerate",
            None if hf_off is None else off["forward_s"] <= hf_off["forward_s"],
        ),
        Row(
            "offloaded forward pass with prefetch",
            "s",
            pre["forward_s"],
            get(hf_off, "forward_s"),
            None,
            "< accel without prefetch",
            pre["forward_s"] < off["forward_s"],
        ),
        Row(
            "offloaded forward, files dropped from the page cache",
            "s",
            off["cold_forward_s"],
            get(hf_off, "cold_forward_s"),
            None,
            "<= Accelerate",
            None if hf_off is None else off["cold_forward_s"] <= hf_off["cold_forward_s"],
        ),
        Row(
            "offloaded forward with prefetch, files dropped from the page cache",
            "s",
            pre["cold_forward_s"],
            get(hf_off, "cold_forward_s"),
            None,
            "< accel without prefetch",
            pre["cold_forward_s"] < off["cold_forward_s"],
        ),
        Row(
            "offloaded output equals in-memory output (checksum diff)",
            "abs",
            abs(off["checksum"] - ours["checksum"]) + abs(pre["checksum"] - ours["checksum"]),
            None if hf_off is None else abs(hf_off["checksum"] - ours["checksum"]),
            abs(raw["checksum"] - ours["checksum"]),
            "0",
            off["checksum"] == ours["checksum"] == pre["checksum"],
        ),
    ]
    return rows
