"""The main job, end to end on CPU: what crosses processes, training with evaluation on 2
processes, a training run killed with SIGKILL and resumed exactly, and inference of a model larger
than its memory budget.

Run by ``nox -s demo`` (which installs everything first), or directly with the packages installed:
``python examples/demo.py``. Each step is a real command; the demo stops at the first failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
TRAIN = str(HERE / "train_digits.py")
# The resume step: 23 optimizer steps per epoch on 2 processes; checkpoints at steps 40, 80, ...,
# 200 (mid-epoch 9); the main process is killed after step 215, so 15 steps are lost and redone.
CHECKPOINT_EVERY = 40
KILLED_AFTER = 215
# In the killed run's output, torch's own log lines ("W1201 17:04:06.955000 ...") and the other
# rank's traceback ("[rank1]: ...", its connection to the dead rank reset); torch's failure table
# starts with a line of "=" and repeats what `accel launch` summarised above it.
_TORCH_NOISE = re.compile(r"^([WEI]\d{4} |\[rank\d+\]:)")


def _accel() -> list[str]:
    found = shutil.which("accel", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "accel_launch"]


def _on_two_processes(script: str, *args: str) -> list[str]:
    return [*_accel(), "launch", "--num_processes", "2", script, *args]


def _run(command: list[str]) -> int:
    print(f"$ {' '.join(command)}", flush=True)
    return subprocess.call(command)


def ops(work: Path) -> int:
    return _run(_on_two_processes(str(HERE / "ops_tour.py")))


def train(work: Path) -> int:
    # Its weights are the reference of the next step.
    return _run(_on_two_processes(TRAIN, "--save-model", str(work / "uninterrupted")))


def kill_and_resume(work: Path) -> int:
    project = work / "resumed"
    options = ["--project-dir", str(project), "--checkpoint-every", str(CHECKPOINT_EVERY)]
    options += ["--save-model", str(project / "model")]
    command = _on_two_processes(TRAIN, *options, "--die-after-step", str(KILLED_AFTER))
    print(f"$ {' '.join(command)}", flush=True)
    killed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = killed.stdout.splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith("====")), len(lines))
    shown = [line for line in lines[:end] if not _TORCH_NOISE.match(line)]
    print("\n".join(shown).rstrip())
    print("(left out: the other rank's traceback and torch's failure table)", flush=True)
    if killed.returncode == 0:
        print(f"FAILED: the run should have died after step {KILLED_AFTER}, but exited 0")
        return 1
    kept = sorted(p.name for p in (project / "checkpoints").iterdir())
    print(f"killed (exit {killed.returncode}); checkpoints left: {', '.join(kept)}", flush=True)

    code = _run(_on_two_processes(TRAIN, *options, "--resume-from", "latest"))
    if code != 0:
        return code
    _show_log(project / "train_digits")
    return _compare(
        work / "uninterrupted" / "model.safetensors", project / "model" / "model.safetensors"
    )


def _show_log(folder: Path) -> None:
    """One line about the JSON-lines log that both attempts wrote to."""
    import json

    for run in sorted(folder.glob("*.run.json")):
        meta = json.loads(run.read_text())
        records = run.with_name(run.name.replace(".run.json", ".jsonl")).read_text().splitlines()
        resumed = ", ".join(str(entry["step"]) for entry in meta.get("resumes", []))
        print(
            f"log {run.parent.name}/{run.name.replace('.run.json', '.jsonl')}: {len(records)} "
            f"records, status {meta['status']}, resumed at step {resumed or '-'}"
        )


def _compare(reference_file: Path, resumed_file: Path) -> int:
    import torch
    from safetensors.torch import load_file

    reference, resumed = load_file(reference_file), load_file(resumed_file)
    differing = [
        name
        for name in sorted(reference.keys() | resumed.keys())
        if name not in reference
        or name not in resumed
        or not torch.equal(reference[name], resumed[name])
    ]
    if differing:
        print(
            "FAILED: the final weights of the resumed run differ from the uninterrupted run's: "
            f"{differing}"
        )
        return 1
    count = sum(tensor.numel() for tensor in reference.values())
    print(
        f"final weights of the killed-and-resumed run and of the uninterrupted run are identical "
        f"bit for bit ({len(reference)} tensors, {count} numbers)"
    )
    return 0


def big_model(work: Path) -> int:
    return _run([sys.executable, str(HERE / "big_model_inference.py")])


STEPS: list[tuple[str, Callable[[Path], int]]] = [
    ("ops on 2 processes", ops),
    ("train and evaluate a digits classifier on 2 processes", train),
    (
        "kill that training with SIGKILL mid-run, resume it from its latest checkpoint",
        kill_and_resume,
    ),
    ("big-model inference with disk offload", big_model),
]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="accel-demo-") as folder:
        for title, step in STEPS:
            print(f"\n=== {title}", flush=True)
            start = time.perf_counter()
            code = step(Path(folder))
            print(f"--- {title}: exit {code} in {time.perf_counter() - start:.1f}s", flush=True)
            if code != 0:
                return code
    print("\ndemo finished: every step succeeded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
