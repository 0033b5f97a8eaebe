"""Compare two builds of accel on the same benchmarks, in one run: ``before`` and ``after`` are
two interpreters (venvs with each build installed), run in turns so that a machine whose load
drifts does not favour either.

Usage: ``python benchmarks/before_after.py --before /tmp/before-venv/bin/python
--after .venv/bin/python [--rounds 3] [--quick] import launch training``. Prints one markdown table:
each measure's median over the rounds for each build (the accel column of the benchmark), and
after / before. Raw PyTorch's figure of the same rounds is shown as a control for the load.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).parent))

from harness import HERE, Context, Row


def _module(name: str) -> ModuleType:
    path = HERE / f"bench_{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(module: ModuleType, python: str, quick: bool) -> list[Row]:
    with tempfile.TemporaryDirectory() as scratch:
        return module.run(Context(python, None, Path(scratch), quick))


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="+", help="benchmark modules (bench_NAME.py)")
    parser.add_argument("--before", required=True, help="interpreter of the build before")
    parser.add_argument("--after", required=True, help="interpreter of the build after")
    parser.add_argument("--rounds", type=int, default=3, help="turns of before, after")
    parser.add_argument("--quick", action="store_true", help="the benchmarks' quick sizes")
    args = parser.parse_args()
    lines = [
        "| benchmark | measure | unit | before | after | after / before | raw (control) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in args.names:
        module = _module(name)
        runs: dict[str, list[list[Row]]] = {"before": [], "after": []}
        for round_index in range(args.rounds):
            for build in ("before", "after") if round_index % 2 == 0 else ("after", "before"):
                print(f"{name}: round {round_index + 1}, {build}", file=sys.stderr, flush=True)
                runs[build].append(_rows(module, getattr(args, build), args.quick))
        for index, row in enumerate(runs["after"][0]):
            before = _median([rows[index].accel for rows in runs["before"]])
            after = _median([rows[index].accel for rows in runs["after"]])
            raw = _median([rows[index].raw for rows in runs["before"] + runs["after"]])
            ratio = "n/a" if not before or after is None else f"{after / before:.3f}x"
            lines.append(
                f"| {name} | {row.measure} | {row.unit} | {_fmt(before)} | {_fmt(after)} "
                f"| {ratio} | {_fmt(raw)} |"
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
