"""Compute the parity cases with Hugging Face Accelerate, and write or compare the table.

    python tests/generate_accelerate_maps.py --hf-python /path/to/venv/bin/python --write
    python tests/generate_accelerate_maps.py            # compare accel with Accelerate, live

The interpreter given by ``--hf-python`` (default: ``$ACCEL_TEST_HF_PYTHON``) must have torch and
accelerate; it runs ``accelerate_side.py`` on the specs of the models built here (so it needs no
transformers). ``--write`` stores Accelerate's results in ``accelerate_device_maps.json``, which
``test_device_map_parity.py`` checks accel against without Accelerate installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from device_map_parity_cases import (
    MODELS,
    build,
    cases,
    describe,
    spec_hash,
    transformers_available,
)
from torch import nn

HERE = Path(__file__).parent
TABLE = HERE / "accelerate_device_maps.json"


def build_models() -> dict[str, nn.Module]:
    """Every model of the cases; those that need transformers only when it is installed."""
    have_transformers = transformers_available()
    return {key: build(key) for key, (_, needs) in MODELS.items() if have_transformers or not needs}


def accelerate_results(
    python: str, models: dict[str, nn.Module], todo: list[dict[str, object]]
) -> tuple[str, dict[str, dict[str, object]]]:
    """Run ``todo`` with Accelerate under ``python``: (Accelerate's version, results by case id)."""
    request = json.dumps({"specs": {k: describe(m) for k, m in models.items()}, "cases": todo})
    done = subprocess.run(
        [python, str(HERE / "accelerate_side.py")],
        input=request,
        capture_output=True,
        text=True,
        cwd=HERE,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} accelerate_side.py failed:\n{done.stderr[-4000:]}")
    answer = json.loads(done.stdout)
    return answer["accelerate_version"], answer["results"]


def write_table(python: str) -> None:
    models = build_models()
    todo = cases(models)
    version, results = accelerate_results(python, models, todo)
    try:
        import transformers

        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    table = {
        "accelerate_version": version,
        "torch_version": torch.__version__,
        "transformers_version": transformers_version,
        "models": {k: spec_hash(describe(m)) for k, m in models.items()},
        "cases": [{**case, "accelerate": results[case["id"]]} for case in todo],
    }
    TABLE.write_text(_dump(table))
    print(f"wrote {len(todo)} cases computed with Accelerate {version} to {TABLE}")


def _dump(table: dict[str, object]) -> str:
    """JSON with one case a line, so a change of Accelerate's maps reads as a short diff."""
    head = {k: v for k, v in table.items() if k != "cases"}
    lines = [json.dumps(head)[:-1] + ', "cases": [']
    rows = [json.dumps(case) for case in table["cases"]]  # type: ignore[attr-defined]
    lines += [f"{row}," for row in rows[:-1]] + rows[-1:]
    return "\n".join(lines) + "\n]}\n"


def compare(python: str) -> int:
    """Print every case where accel's result differs from Accelerate's; return how many of them
    are not listed as deviations."""
    from device_map_parity_cases import run_case

    import accel_bigmodel

    models = build_models()
    todo = cases(models)
    _, results = accelerate_results(python, models, todo)
    differ = 0
    for case in todo:
        ours = run_case(case, models[str(case["model"])], accel_bigmodel)
        if ours != results[str(case["id"])]:
            differ += "deviation" not in case
            note = f" (on purpose: {case['deviation']})" if "deviation" in case else ""
            print(f"{case['id']}{note}\n  accel:      {ours}\n  accelerate: {results[case['id']]}")
    print(f"{differ} of {len(todo)} cases differ from Accelerate without being listed deviations")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf-python", default=os.environ.get("ACCEL_TEST_HF_PYTHON"))
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.name}")
    args = parser.parse_args()
    if not args.hf_python:
        sys.exit("pass --hf-python or set ACCEL_TEST_HF_PYTHON to a Python that has accelerate")
    if args.write:
        write_table(args.hf_python)
    elif compare(args.hf_python):
        sys.exit(1)


if __name__ == "__main__":
    main()
