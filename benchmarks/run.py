"""Run every benchmarks/bench_*.py module and write benchmarks/RESULTS.md.

Usage: ``nox -s bench`` (builds the Hugging Face Accelerate venv), or directly
``python benchmarks/run.py [--quick] [name ...]`` where a name selects modules by substring; a
run of selected modules replaces only their sections of an existing RESULTS.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bytecode import compile_accel
from harness import HERE, Context, hf_python_from_env, markdown, this_python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "names", nargs="*", help="run only modules whose name contains one of these"
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller sizes")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    args = parser.parse_args()
    modules = sorted(HERE.glob("bench_*.py"))
    if args.names:
        modules = [m for m in modules if any(n in m.stem for n in args.names)]
    sections = [
        "# Benchmark results",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, "
        f"Python {platform.python_version()}, "
        f"Hugging Face Accelerate venv: {'yes' if hf_python_from_env() else 'absent'}.",
        "",
    ]
    compile_accel()  # measured as installed: a wheel's modules are compiled at install
    failures = 0
    for path in modules:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with tempfile.TemporaryDirectory() as scratch:
            ctx = Context(this_python(), hf_python_from_env(), Path(scratch), args.quick)
            print(f"running {path.stem} ...", flush=True)
            try:
                rows = module.run(ctx)
            except Exception as error:  # a broken benchmark is reported, the others still run
                failures += 1
                sections.append(f"### {module.TITLE}\n\nfailed: {error}\n")
                print(f"{path.stem} failed: {error}", file=sys.stderr)
                continue
        table = markdown(module.TITLE, rows)
        print(table, flush=True)
        sections.append(table)
    output = Path(args.output)
    if args.names and output.exists():
        sections = _merged(output.read_text(), sections)
    output.write_text("\n".join(sections))
    print(f"wrote {args.output}")
    return 1 if failures else 0


def _merged(previous: str, sections: list[str]) -> list[str]:
    """``previous`` with the ``### `` sections measured now replaced (a partial run keeps the rest).

    The header of ``previous`` stays, with one ``Measured again <date>: <section>.`` line per
    section measured since (a section measured again replaces its older line).
    """
    old_parts = previous.split("\n### ")
    new_tables = {part.split("\n", 1)[0][4:]: part for part in sections if part.startswith("### ")}
    again = [f"Measured again {time.strftime('%Y-%m-%d')}: {title}." for title in new_tables]
    kept = [
        line
        for line in old_parts[0].rstrip().splitlines()
        if not any(
            line.startswith("Measured again ") and line.endswith(f": {t}.") for t in new_tables
        )
    ]
    merged = ["\n".join(kept).rstrip(), ""]
    merged += [line + "\n" for line in again]
    for part in old_parts[1:]:
        title = part.split("\n", 1)[0]
        merged.append(new_tables.pop(title, "### " + part).rstrip() + "\n")
    merged += [table.rstrip() + "\n" for table in new_tables.values()]
    return merged


if __name__ == "__main__":
    raise SystemExit(main())
