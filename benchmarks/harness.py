"""The small shared part of the benchmarks: timing subprocesses and writing result rows.

Each ``bench_*.py`` module beside this file defines ``run(ctx: Context) -> list[Row]``. The
workloads run in subprocesses: ours and raw PyTorch with this interpreter, Hugging Face Accelerate
with the interpreter of its own venv (``ctx.hf_python``; ``None`` when that venv is absent, and the
Accelerate column then reads n/a). Machines are noisy, so results are ratios measured in one run,
never pass/fail tests.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


@dataclass
class Context:
    """What a benchmark module gets: the interpreters to compare and a scratch folder."""

    python: str
    hf_python: str | None
    scratch: Path
    quick: bool


@dataclass
class Row:
    """One measurement, side by side. ``None`` means not measured (shown as n/a)."""

    measure: str
    unit: str
    accel: float | None
    accelerate: float | None = None
    raw: float | None = None
    target: str = ""
    met: bool | None = None


def median_seconds(action: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of ``action`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_command(
    command: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600
) -> str:
    """Run a command to completion, raising with its output if it fails; returns stdout."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run(
        list(command), env=full_env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {done.returncode}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def time_command(
    command: Sequence[str], repeats: int = 5, env: dict[str, str] | None = None
) -> float:
    """Median wall seconds of a whole command."""
    return median_seconds(lambda: run_command(command, env), repeats)


def json_result(
    command: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600
) -> dict:
    """Run a workload that prints one JSON object as its last line of stdout, and return it."""
    lines = run_command(command, env, timeout).strip().splitlines()
    return json.loads(lines[-1])


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None or denominator == 0:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g}"


def markdown(title: str, rows: list[Row]) -> str:
    """A markdown table of rows: values, the two ratios, the target and whether it was met."""
    out = [
        f"### {title}",
        "",
        "| measure | unit | accel | Accelerate | raw PyTorch | accel / raw | accel / Accelerate "
        "| target | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "n/a" if r.met is None else ("yes" if r.met else "NO")
        out.append(
            f"| {r.measure} | {r.unit} | {_fmt(r.accel)} | {_fmt(r.accelerate)} | {_fmt(r.raw)} "
            f"| {ratio(r.accel, r.raw)} | {ratio(r.accel, r.accelerate)} | {r.target} | {met} |"
        )
    return "\n".join(out) + "\n"


def hf_python_from_env() -> str | None:
    value = os.environ.get("ACCEL_BENCH_HF_PYTHON")
    return value if value and Path(value).exists() else None


def this_python() -> str:
    return sys.executable
