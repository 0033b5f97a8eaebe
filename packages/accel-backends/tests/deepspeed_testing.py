"""Starting the DeepSpeed workers of ``deepspeed_workers.py`` from the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker_env import worker_env

from accel_testing.processes import WorkerResult, run_workers

WORKERS = Path(__file__).parent / "deepspeed_workers.py"
FEATURE_WORKERS = Path(__file__).parent / "deepspeed_feature_workers.py"


def run(
    function: str,
    out: Path,
    *args: str,
    processes: int = 2,
    workers: Path = WORKERS,
    timeout: float = 240,
) -> list[WorkerResult]:
    """Run ``<workers>.<function>(out, *args)`` on ``processes`` real processes."""
    return run_workers(
        processes,
        function=f"{workers}::{function}",
        args=[str(out), *args],
        env=worker_env(),
        timeout=timeout,
    )


def run_workers_with(
    workers: str,
    function: str,
    out: Path,
    *args: str,
    env: dict[str, str],
    processes: int = 2,
    timeout: float = 240,
) -> list[WorkerResult]:
    """Run ``<workers>.<function>(out, *args)`` (a module beside this one) on ``processes``
    real processes, with ``env`` added to the workers' environment."""
    return run_workers(
        processes,
        function=f"{Path(__file__).parent / workers}::{function}",
        args=[str(out), *args],
        env=worker_env(**env),
        timeout=timeout,
    )


def results(out: Path) -> Any:
    """What the workers wrote into ``out/results.json``."""
    return json.loads((out / "results.json").read_text())
