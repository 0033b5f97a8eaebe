"""The layout tests' shared part: run a matrix of launches (each saving and loading checkpoints
in turn, see ``layout_workers.py`` / ``deepspeed_layout_workers.py``) and read what each rank
found for a cell."""

from __future__ import annotations

import json
from pathlib import Path

from worker_env import worker_env

from accel_testing.processes import run_workers

#: What a rank reports for a cell that loaded exactly: the strategy, no difference in the model
#: (every weight equal, dtype included) nor in the optimizer (Adam's exp_avg, exp_avg_sq and
#: step, the groups' settings), states that differed before the load, and training afterwards.
LOADED_EXACTLY = {"model": None, "optimizer": None, "differed_before": True, "trains": True}


def run_matrix(
    out: Path, workers: str, launches: list[tuple[str, int, list[str]]], **env: str
) -> Path:
    """Run each ``(label, processes, steps)`` launch of ``workers`` in order; returns ``out``."""
    for label, processes, steps in launches:
        run_workers(
            processes,
            function=workers,
            args=[str(out), label, *steps],
            env=worker_env(**env),
            timeout=300,
        )
    return out


def cell_results(out: Path, launch: str, processes: int, cell: str) -> list[dict]:
    """What each of the launch's ranks reported for ``cell``."""
    return [
        json.loads((out / f"result_{launch}_{rank}.json").read_text())[cell]
        for rank in range(processes)
    ]
