"""The main job, end to end on CPU: what crosses processes, training with evaluation on 2
processes, and inference of a model larger than its memory budget.

Run by ``nox -s demo`` (which installs everything first), or directly with the packages installed:
``python examples/demo.py``. Each step is a real command; the demo stops at the first failure.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def _accel() -> list[str]:
    found = shutil.which("accel", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "accel_launch"]


STEPS = [
    (
        "ops on 2 processes",
        [*_accel(), "launch", "--num_processes", "2", str(HERE / "ops_tour.py")],
    ),
    (
        "train and evaluate a digits classifier on 2 processes",
        [*_accel(), "launch", "--num_processes", "2", str(HERE / "train_digits.py")],
    ),
    (
        "big-model inference with disk offload",
        [sys.executable, str(HERE / "big_model_inference.py")],
    ),
]


def main() -> int:
    for title, command in STEPS:
        print(f"\n=== {title}\n$ {' '.join(command)}", flush=True)
        start = time.perf_counter()
        code = subprocess.call(command)
        print(f"--- {title}: exit {code} in {time.perf_counter() - start:.1f}s", flush=True)
        if code != 0:
            return code
    print("\ndemo finished: every step succeeded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
