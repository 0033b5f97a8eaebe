"""What Hugging Face Accelerate does in the fault cases accel handles, side by side.

    python benchmarks/faults_vs_accelerate.py [--repeats N] [--cases 1,2,3] [--out PATH]

Both libraries run the same user's script on 2 CPU processes (gloo): accel
``integration-tests/faults/train_job.py``, Accelerate its twin
``benchmarks/workloads/faults_job_accelerate.py`` (same model, data, seed, step counter;
``ProjectConfiguration(automatic_checkpoint_naming=True)``, ``save_state()`` every 4 steps,
``load_state()`` and ``skip_first_batches`` on resume; 2 processes x 12 batches x 3 epochs = 36
steps). Every launch has ``OMP_NUM_THREADS=1`` and 120 s; past that it counts as hung (and its
processes are killed). Each library's faulted runs are compared with an uninterrupted run of the
same library (final weights, ``torch.equal``).

1. **restart**: ``--max_restarts 1``, rank 1 SIGKILLs itself at step 10 (checkpoint at 8).
   Outcome per try: finished and bit-identical, finished but different, failed (exit code and
   first distinctive error line) or hung. ``--repeats`` tries (default 5).
2. **SIGTERM to the launcher** at step 13 (rank 0 sends it): exit code, the newest checkpoint's
   step (newer than the periodic one of step 12?), then the same command again: steps lost =
   steps done before the signal minus the step the resumed run starts from.
3. **a lost machine, replaced**: two launchers on loopback as two machines (1 process each),
   ``--max_restarts 3`` (accel with ``--rdzv_backend c10d``, Accelerate with its default
   rendezvous); rank 1 SIGKILLs its own launcher at step 10, then a replacement launcher for
   machine 1 starts: does the job finish, bit-identically?

Launch commands. accel: ``accel launch --quiet --cpu --num_processes 2``. Accelerate:
``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2``: with ``--cpu``,
``accelerate launch`` starts the script once, as one process without torch.distributed
(its "simple launcher"; ``--num_processes`` and ``--max_restarts`` are ignored), so only
``--multi_gpu`` gets 2 CPU processes under torch's elastic agent; ``ACCELERATE_USE_CPU=1`` keeps
them on CPU. Accelerate's workers are children of the launcher process (its elastic agent runs
in it), so the job signals ``os.getppid()``; it records that process's command line and the
script checks it is ``accelerate launch``. accel's job runs with ``ACCEL_PREEMPTION_VOTE_SECONDS=0``
(as its tests do: its steps take milliseconds, and the ranks otherwise vote on a signal every
0.2 s).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
ACCEL = "/work/venv/bin/accel"
ACCELERATE = "/work/hfvenv/bin/accelerate"
JOBS = {
    "accel": str(ROOT / "integration-tests" / "faults" / "train_job.py"),
    "Accelerate": str(ROOT / "benchmarks" / "workloads" / "faults_job_accelerate.py"),
}
TIMEOUT = 120.0
LIBRARIES = ("accel", "Accelerate")


def _env(library: str) -> dict[str, str]:
    prefixes = ("ACCEL_", "ACCELERATE_", "RANK", "LOCAL_RANK", "WORLD_", "MASTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith((*prefixes, "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if library == "accel":
        env["ACCEL_PREEMPTION_VOTE_SECONDS"] = "0"
    else:
        env["ACCELERATE_USE_CPU"] = "1"
    return env


def _command(library: str, project: Path, *job: str, launch: tuple[str, ...] = ()) -> list[str]:
    if library == "accel":
        launcher = [ACCEL, "launch", "--quiet", "--cpu", "--num_processes", "2", *launch]
    else:
        launcher = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", *launch]
    return [
        *launcher,
        JOBS[library],
        "--project",
        str(project),
        "--result",
        str(project / "result.pt"),
        *job,
    ]


def _kill_leftovers(project: Path) -> None:
    """SIGKILL every process this script started for ``project`` that is still alive."""
    needle = str(project).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def _kill_rank(project: Path, rank: int) -> int:
    """SIGKILL the still running workers of ``project`` with global rank ``rank``; how many."""
    needle, killed = str(project).encode(), 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if needle in (entry / "cmdline").read_bytes() and f"RANK={rank}".encode() in environ:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            pass
    return killed


def _start(command: list[str], library: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            command, env=_env(library), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The exit code, or None (hung: the launcher's process group is killed)."""
    try:
        return process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        return None


def _launch(
    library: str, project: Path, *job: str, launch: tuple[str, ...] = ()
) -> tuple[int | None, str]:
    project.mkdir(parents=True, exist_ok=True)
    log = project / f"launch_{len(list(project.glob('launch_*.log')))}.log"
    process = _start(_command(library, project, *job, launch=launch), library, log)
    code = _wait(process, time.monotonic() + TIMEOUT)
    _kill_leftovers(project)
    return code, log.read_text(errors="replace")


def _error_line(output: str) -> str:
    """The first distinctive error line of a failed launch, without file paths and ports."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    picks = [line for line in lines if "connectFullMesh failed" in line and "Error" in line]
    picks = picks or [line for line in lines if re.search(r"\b\w*(Error|Exception): ", line)]
    picks = picks or [line for line in lines if "error" in line.lower()] or lines[-1:] or ["?"]
    line = re.sub(r"\[/[^\]]*\]\s*", "", picks[0])
    line = re.sub(r"\[(\d+\.\d+\.\d+\.\d+)\]:\d+(\$\d+)?", r"\1:PORT", line)
    line = re.sub(r"^\[?rank\d+\]?:\s*", "", line)
    return line[:160]


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    line = re.sub(r"\[/[^\]]*\]\s*", "", lines[-1] if lines else "(no output)")
    return re.sub(r"\[(\d+\.\d+\.\d+\.\d+)\]:\d+(\$\d+)?", r"\1:PORT", line)[:160]


def _weights(project: Path) -> dict[str, torch.Tensor] | None:
    result = project / "result.pt"
    return torch.load(result, weights_only=False)["weights"] if result.is_file() else None


def _identical(project: Path, reference: dict[str, torch.Tensor]) -> bool:
    weights = _weights(project)
    return (
        weights is not None
        and weights.keys() == reference.keys()
        and all(torch.equal(weights[k], v) for k, v in reference.items())
    )


def _steps(project: Path, rank: int) -> list[tuple[int, str]]:
    path = project / f"steps_{rank}.log"
    words = path.read_text().split() if path.is_file() else []
    return [(int(s), a) for s, a in zip(words[::2], words[1::2], strict=True)]


def _checkpoint_steps(project: Path) -> list[int]:
    """The step counter saved in each checkpoint folder that has one (the job's own object)."""
    steps = []
    for folder in (project / "checkpoints").glob("checkpoint_*"):
        state = folder / "custom_checkpoint_0.pkl"
        if state.is_file():
            try:
                steps.append(int(torch.load(state, weights_only=False)["step"]))
            except Exception:  # a half-written checkpoint
                pass
    return sorted(steps)


def _finished(
    code: int | None, output: str, project: Path, reference: dict[str, torch.Tensor]
) -> str:
    if code is None:
        return f"hung (> {TIMEOUT:.0f} s)"
    if code != 0:
        return f"failed: exit {code}, {_error_line(output)}"
    return (
        "finished, bit-identical"
        if _identical(project, reference)
        else "finished, different weights"
    )


def _summary(outcomes: list[str]) -> str:
    counts = collections.Counter(outcomes)
    return "; ".join(
        f"{n}x {outcome}" if len(outcomes) > 1 else outcome for outcome, n in counts.items()
    )


def _reference(library: str, work: Path) -> dict[str, torch.Tensor]:
    project = work / library / "uninterrupted"
    code, output = _launch(library, project)
    assert code == 0, output[-3000:]
    for rank in (0, 1):  # two processes ran, 36 steps each
        assert _steps(project, rank)[-1] == (36, "0"), (library, rank, output[-2000:])
    weights = _weights(project)
    assert weights is not None
    return weights


def case_restart(library: str, work: Path, reference: dict[str, torch.Tensor], tries: int) -> str:
    outcomes = []
    for run in range(tries):
        project = work / library / f"restart_{run}"
        code, output = _launch(library, project, "--die-at", "10", launch=("--max_restarts", "1"))
        outcome = _finished(code, output, project, reference)
        resumed = [step for step, attempt in _steps(project, 0) if attempt == "1"]
        if code == 0 and resumed:
            outcome += f" (attempt 1 from step {resumed[0]})"
        outcomes.append(outcome)
        print(f"  restart {library} #{run}: {outcome}", flush=True)
    return _summary(outcomes)


def case_sigterm(library: str, work: Path, reference: dict[str, torch.Tensor], tries: int) -> str:
    outcomes = []
    for run in range(tries):
        project = work / library / f"sigterm_{run}"
        job = ("--signal-at", "13", "--signal", "SIGTERM")
        code, output = _launch(library, project, *job)
        target = (
            (project / "signalled").read_text().strip() if (project / "signalled").is_file() else ""
        )
        if library == "Accelerate":
            assert "accelerate launch" in target, f"signalled {target!r}, not the launcher"
        done = max((step for rank in (0, 1) for step, _ in _steps(project, rank)), default=0)
        saved = _checkpoint_steps(project)
        newest = saved[-1] if saved else 0
        before = len(_steps(project, 0))
        again, again_output = _launch(library, project, *job)
        after = _steps(project, 0)[before:]
        start = after[0][0] - 1 if after else None
        lost = done - start if start is not None else "?"
        parts = [
            "hung"
            if code is None
            else f"exit {code}" + (f" ({_error_line(output)})" if code else ""),
            f"{done} steps done",
            f"newest checkpoint: step {newest}"
            + (" (newer than 12)" if newest > 12 else " (none newer than 12)"),
            f"rerun resumes from step {start}, {lost} steps lost",
            "rerun " + _finished(again, again_output, project, reference),
        ]
        outcomes.append(", ".join(parts))
        print(f"  sigterm {library} #{run}: {outcomes[-1]}", flush=True)
    return _summary(outcomes)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _machine(
    library: str, project: Path, job: tuple[str, ...], launch: tuple[str, ...], rank: int, name: str
) -> subprocess.Popen[bytes]:
    command = _command(library, project, *job, launch=(*launch, "--machine_rank", str(rank)))
    return _start(command, library, project / f"{name}.log")


def case_lost_machine(
    library: str, work: Path, reference: dict[str, torch.Tensor], tries: int
) -> str:
    outcomes = []
    for run in range(tries):
        project = work / library / f"machine_{run}"
        project.mkdir(parents=True)
        port = str(_free_port())
        launch = (
            "--num_machines",
            "2",
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            port,
        )
        launch += ("--max_restarts", "3")
        if library == "accel":
            launch += ("--rdzv_backend", "c10d")
        job = ("--signal-at", "10", "--signal-rank", "1", "--signal", "SIGKILL")

        deadline = time.monotonic() + TIMEOUT
        main = _machine(library, project, job, launch, 0, "machine0")
        lost = _wait(_machine(library, project, job, launch, 1, "machine1"), deadline)
        # the machine is gone: so are its workers, if they outlived their launcher
        orphans = _kill_rank(project, 1)
        deadline = time.monotonic() + TIMEOUT  # the replacement's 120 s, machine 0 waits as long
        replacement_code = _wait(
            _machine(library, project, job, launch, 1, "replacement"), deadline
        )
        main_code = _wait(main, deadline)
        _kill_leftovers(project)
        main_output = (project / "machine0.log").read_text(errors="replace")
        replacement_output = (project / "replacement.log").read_text(errors="replace")
        killed = "killed" if lost == -signal.SIGKILL else f"lost launcher exit {lost}"
        killed += f" ({orphans} of its workers outlived it)" if orphans else ""
        outcome = f"machine 1 {killed}; machine 0: " + _finished(
            main_code, main_output, project, reference
        )
        outcome += "; replacement: " + (
            f"hung (> {TIMEOUT:.0f} s)"
            if replacement_code is None
            else f"exit {replacement_code}"
            + ("" if replacement_code == 0 else f", {_error_line(replacement_output)}")
        )
        if main_code is None:
            outcome += f" (machine 0's last line: {_last_line(main_output)})"
        if replacement_code is None:
            outcome += f" (replacement's last line: {_last_line(replacement_output)})"
        outcomes.append(outcome)
        print(f"  machine {library} #{run}: {outcome}", flush=True)
    return _summary(outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=None, help="tries per case (5 for case 1, 1 else)"
    )
    parser.add_argument("--cases", default="1,2,3")
    parser.add_argument("--out", default="/tmp/faults_vs_accelerate.md")
    parser.add_argument("--keep", action="store_true", help="keep the project folders and logs")
    args = parser.parse_args()
    cases = {
        "1": ("restart (rank 1 SIGKILLed at step 10, --max_restarts 1)", case_restart, 5),
        "2": ("SIGTERM to the launcher at step 13, then the same command again", case_sigterm, 1),
        "3": (
            "machine 1's launcher SIGKILLed at step 10, replacement started",
            case_lost_machine,
            1,
        ),
    }
    rows = []
    work = Path(tempfile.mkdtemp(prefix="faults_vs_accelerate_"))
    if args.keep:
        print(f"project folders and logs: {work}", flush=True)
    try:
        references = {}
        for library in LIBRARIES:
            print(f"uninterrupted {library}", flush=True)
            references[library] = _reference(library, work)
        for key in args.cases.split(","):
            title, run, default = cases[key]
            tries = args.repeats if args.repeats is not None else default
            for library in LIBRARIES:
                print(f"case {key} {library}", flush=True)
                rows.append(
                    (
                        f"{key}. {title}",
                        library,
                        tries,
                        run(library, work, references[library], tries),
                    )
                )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    lines = ["| case | library | tries | outcomes |", "|---|---|---|---|"]
    lines += [
        f"| {case} | {library} | {tries} | {outcomes} |" for case, library, tries, outcomes in rows
    ]
    lines += [
        "",
        "accel: `accel launch --quiet --cpu --num_processes 2` (ACCEL_PREEMPTION_VOTE_SECONDS=0); "
        "Accelerate 1.15: `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2` "
        "(`--cpu` would start one process without torch.distributed). "
        f"torch {torch.__version__}, OMP_NUM_THREADS=1, {TIMEOUT:.0f} s per launch; "
        "bit-identical = final weights torch.equal to an uninterrupted run of the same library.",
    ]
    table = "\n".join(lines) + "\n"
    Path(args.out).write_text(table)
    print(table)


if __name__ == "__main__":
    sys.exit(main())
