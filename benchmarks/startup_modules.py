"""Start-up audit: which modules a process has loaded, and how long it took, after each step of
getting to a first DDP training step (issue 34).

Each case runs in fresh interpreters (``--repeats`` times, median). Reported per case:

- ``modules``: ``len(sys.modules)`` after the case's code ran (the interpreter's own included);
- ``ours``: how many of them are accel's (names starting with ``accel``);
- ``wall s``: wall seconds of the case's code inside the process (interpreter start excluded);
- ``cpu s``: the CPU seconds the process spent on it (``time.process_time``), which another
  load on the machine disturbs less than the wall time.

``-X importtime`` is not used: it does not see modules imported through ``importlib``
(``import_module``, as lazy packages' ``__getattr__`` does), so it would credit a lazy package with
less than it costs.

The DDP case runs two processes (a 2-process gloo group, set up through torchrun's environment
variables) that build an ``Accelerator``, ``prepare`` a model, optimizer and data loader (DDP) and
run one training step; rank 0 reports. The ``torch imported:`` cases import torch before the
clock starts, so that their time is accel's own part, without torch's import and its variation.

Usage: ``python benchmarks/startup_modules.py [--src CHECKOUT ...] [--repeats 3] [--list CASE]
[CASE ...]``. ``--src`` names a checkout whose ``packages/*/src`` go first on ``PYTHONPATH``
(default: the one holding this file), so checkouts compare with the same interpreter; given
several times (before, after), their runs alternate, so that a load on the machine that drifts
favours none. ``--list`` prints the accel modules a case loaded, to see what is there and should
not be; CASE arguments select cases whose name contains them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent

# The case's code runs between two clock reads; the report is printed after the modules are
# counted, so that json (imported to print it) is not counted.
_PROBE = """\
import sys, time
{setup}
_start, _cpu = time.perf_counter(), time.process_time()
{code}
_seconds, _cpu = time.perf_counter() - _start, time.process_time() - _cpu
_names = sorted(sys.modules)
import json
if int(__import__("os").environ.get("RANK", "0")) == 0:
    print(json.dumps({{"seconds": _seconds, "cpu": _cpu, "modules": _names}}))
"""

_DDP_STEP = """\
import torch
from accel_core import Accelerator
accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
optimizer = torch.optim.AdamW(model.parameters())
data = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randint(0, 2, (64,)))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
x, y = next(iter(loader))
accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
optimizer.step()
optimizer.zero_grad()
assert accelerator.num_processes == 2, accelerator.num_processes
"""


@dataclass(frozen=True)
class Case:
    """One thing a script does at start, as code run in a fresh interpreter."""

    name: str
    code: str
    processes: int = 1
    setup: str = ""  # run before the clock starts (its modules are counted)


CASES = (
    Case("import torch (floor)", "import torch"),
    Case("import accel_ops", "import accel_ops"),
    Case("from accel_ops import PartialState", "from accel_ops import PartialState"),
    Case("import accel_core", "import accel_core"),
    Case("from accel_core import Accelerator", "from accel_core import Accelerator"),
    Case(
        "Accelerator(cpu=True)",
        "from accel_core import Accelerator\nAccelerator(cpu=True)",
    ),
    Case("prepare + 1 DDP step, 2 processes", _DDP_STEP, processes=2),
    # accel's own part: torch is imported before the clock starts
    Case(
        "torch imported: from accel_ops import PartialState",
        "from accel_ops import PartialState",
        setup="import torch",
    ),
    Case(
        "torch imported: Accelerator(cpu=True)",
        "from accel_core import Accelerator\nAccelerator(cpu=True)",
        setup="import torch",
    ),
)


@dataclass
class Measure:
    """What one run of a case reported (rank 0's, for several processes)."""

    seconds: float
    cpu_seconds: float
    modules: list[str]


def _ours(name: str) -> bool:
    return name.startswith("accel")


def _environment(src: Path) -> dict[str, str]:
    paths = [str(p) for p in sorted((src / "packages").glob("*/src"))]
    previous = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths + ([previous] if previous else [])),
        "OMP_NUM_THREADS": "1",
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _rank_environments(case: Case, env: dict[str, str]) -> list[dict[str, str]]:
    if case.processes == 1:
        return [env]
    port = str(_free_port())
    common = {
        "WORLD_SIZE": str(case.processes),
        "LOCAL_WORLD_SIZE": str(case.processes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
    }
    return [
        {**env, **common, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        for rank in range(case.processes)
    ]


def _run_together(
    command: list[str], environments: list[dict[str, str]], scratch: Path
) -> list[tuple[int, str, str]]:
    """Start one process per environment, wait for all; (exit code, stdout, stderr) of each.

    Output goes to files, not pipes: a rank blocked on a full pipe that nobody reads yet would
    hold the other up at its first collective.
    """
    started = []
    for rank, environment in enumerate(environments):
        out, err = scratch / f"{rank}.out", scratch / f"{rank}.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            process = subprocess.Popen(command, env=environment, stdout=stdout, stderr=stderr)
        started.append((process, out, err))
    try:
        for process, _, _ in started:
            process.wait(timeout=600)
    finally:
        for process, _, _ in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [(p.returncode, out.read_text(), err.read_text()) for p, out, err in started]


def run_case(case: Case, env: dict[str, str]) -> Measure:
    """Run ``case`` once in fresh interpreters; raise with their output if one fails."""
    command = [sys.executable, "-c", _PROBE.format(setup=case.setup, code=case.code)]
    with tempfile.TemporaryDirectory() as scratch:
        results = _run_together(command, _rank_environments(case, env), Path(scratch))
    for returncode, stdout, stderr in results:
        if returncode != 0:
            raise RuntimeError(
                f"case {case.name!r} exited {returncode}\n{stdout[-2000:]}\n{stderr[-3000:]}"
            )
    report = json.loads(results[0][1].strip().splitlines()[-1])
    return Measure(report["seconds"], report["cpu"], report["modules"])


def _cells(name: str, runs: list[Measure]) -> list[str]:
    modules = runs[-1].modules
    return [
        name,
        str(len(modules)),
        str(sum(1 for module in modules if _ours(module))),
        f"{statistics.median(m.seconds for m in runs):.3f}",
        f"{statistics.median(m.cpu_seconds for m in runs):.3f}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--src", type=Path, action="append", help="a checkout to measure (repeat to compare)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    parser.add_argument(
        "--list", metavar="CASE", help="print the accel modules of cases whose name contains CASE"
    )
    parser.add_argument("cases", nargs="*", help="run only cases whose name contains one of these")
    args = parser.parse_args()
    checkouts = [path.resolve() for path in args.src or [HERE.parent]]
    environments = [_environment(checkout) for checkout in checkouts]
    cases = [c for c in CASES if not args.cases or any(n in c.name for n in args.cases)]
    for number, checkout in enumerate(checkouts, 1):
        print(f"checkout {number}: {checkout}")
    print(f"median of {args.repeats} runs\n")
    print("| case | checkout | modules | ours | wall s | cpu s |")
    print("|---|---|---|---|---|---|")
    listed: list[str] = []
    for case in cases:
        runs: list[list[Measure]] = [[] for _ in checkouts]
        for _ in range(args.repeats):
            for measures, env in zip(runs, environments, strict=True):
                measures.append(run_case(case, env))
        for number, measures in enumerate(runs, 1):
            name, *numbers = _cells(case.name, measures)
            print(f"| {name} | {number} | {' | '.join(numbers)} |", flush=True)
            if args.list and args.list in case.name:
                ours = [module for module in measures[-1].modules if _ours(module)]
                listed.append(f"\n{case.name}, checkout {number}: {len(ours)} accel modules")
                listed.extend(f"  {module}" for module in ours)
    print("\n".join(listed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
