"""Shared helpers of the GPU check steps: pick the device, print one PASS/FAIL line."""

from __future__ import annotations

import json
import os
import sys
import traceback

import torch


def device() -> torch.device:
    """cuda:0 when there is a GPU, else the CPU (the steps also run here, on CPU, as a dry run)."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def report(step: str, ok: bool, **numbers) -> None:
    """One line the shell script and RESULTS.md read: ``STEP <name>: PASS|FAIL {numbers}``."""
    line = f"STEP {step}: {'PASS' if ok else 'FAIL'} {json.dumps(numbers, default=str)}"
    print(line, flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "steps.txt"), "a") as f:
            f.write(line + "\n")


def run(step: str, body) -> None:
    """Run ``body`` (returns (ok, numbers)); an exception is a FAIL naming it, exit code 1."""
    try:
        ok, numbers = body()
    except Exception as error:
        traceback.print_exc()
        report(step, False, error=f"{type(error).__name__}: {error}"[:600])
        sys.exit(1)
    report(step, ok, **numbers)
    sys.exit(0 if ok else 1)
