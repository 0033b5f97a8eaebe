"""Start-up as a user feels it: from the start of a worker process to the end of its first
training step, the same 2-process DDP loop on CPU (gloo) written with accel, Hugging Face
Accelerate, Lightning Fabric and by hand with torch (workloads/first_step.py).

Every run is ``python -m torch.distributed.run --standalone --nproc_per_node 2`` of its library's
venv (the launcher is the same program for all four; accel's own launcher is measured in
bench_launch). A run's figure is the slower rank's; runs alternate between the libraries, the
order rotating each round, after one warm-up round; the figures are medians over the rounds.
Lightning Fabric runs from the venv named by ``ACCEL_BENCH_FABRIC_PYTHON`` (n/a without it); its
figure is a row of its own, in the accel column, against the same hand-written loop. The module
counts come from ``benchmarks/startup_modules.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from harness import HERE, Context, Row, run_command

TITLE = "Start-up: worker start to end of the first DDP step, 2 CPU processes (seconds)"
WORKLOAD = str(HERE / "workloads" / "first_step.py")


def fabric_python() -> str | None:
    value = os.environ.get("ACCEL_BENCH_FABRIC_PYTHON")
    return value if value and Path(value).exists() else None


def _run(python: str, library: str, result: Path) -> float:
    result.unlink(missing_ok=True)
    command = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run_command([*command, WORKLOAD, library, str(result)], {"PYTHONUNBUFFERED": "1"})
    lines = [json.loads(line) for line in result.read_text().splitlines()]
    assert sorted(line["rank"] for line in lines) == [0, 1], lines
    return max(line["seconds"] for line in lines)


def run(ctx: Context) -> list[Row]:
    pythons = {"accel": ctx.python, "raw": ctx.python}
    if ctx.hf_python:
        pythons["accelerate"] = ctx.hf_python
    if fabric := fabric_python():
        pythons["fabric"] = fabric
    libraries = list(pythons)
    rounds = 2 if ctx.quick else 7
    seconds: dict[str, list[float]] = {library: [] for library in libraries}
    for number in range(rounds + 1):
        order = libraries[number % len(libraries) :] + libraries[: number % len(libraries)]
        for library in order:
            figure = _run(pythons[library], library, ctx.scratch / "first_step.jsonl")
            if number:  # the first round warms the page cache up
                seconds[library].append(figure)
    print(f"first step rounds: {seconds}", file=sys.stderr)
    median = {library: statistics.median(values) for library, values in seconds.items()}
    raw = median["raw"]
    rows = [
        Row(
            "worker start -> end of first step (imports, process group, prepare, one step)",
            "s",
            median["accel"],
            accelerate=median.get("accelerate"),
            raw=raw,
            target="<= raw + 0.1 s",
            met=median["accel"] <= raw + 0.1,
        ),
        Row(
            "the same with Lightning Fabric (Fabric's figure in the accel column)",
            "s",
            median.get("fabric"),
            raw=raw,
        ),
    ]
    return rows


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
