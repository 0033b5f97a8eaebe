"""Run the self-check on this rank: parse the arguments, run every check, report, exit code.

:func:`main` joins the process group, builds the list of checks (torch.distributed's always;
accel-ops' and accel-core's only when every rank can import them, since a rank that skipped a
collective would leave the others waiting), runs them all, gathers every rank's results on every
rank and has rank 0 print the report. It destroys the process group before it returns, and
returns 1 when any check failed on any rank, else 0.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
from collections.abc import Sequence

import torch.distributed as dist

from accel_launch.selfcheck.checks import Check, Result, run_check
from accel_launch.selfcheck.core_checks import core_checks
from accel_launch.selfcheck.ops_checks import ops_checks
from accel_launch.selfcheck.process_group import agree, all_gather_json, join
from accel_launch.selfcheck.report import any_failed, report
from accel_launch.selfcheck.torch_checks import torch_checks


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    from accel_launch import selfcheck  # for its docstring; the package imports this module

    parser = argparse.ArgumentParser(
        prog="selfcheck", description=(selfcheck.__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="The number of processes asked for (default: WORLD_SIZE, else 1).",
    )
    parser.add_argument(
        "--asked-by", default=None, help="Where that number came from, for the report."
    )
    parser.add_argument(
        "--perturb-reference",
        type=float,
        default=0.0,
        help="For tests: add this to the training check's reference weights (it must then fail).",
    )
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] = ()) -> int:
    """Run the checks; rank 0 prints the report. Returns the exit code (1 if any check failed)."""
    args = _parse(argv)
    job = join(args.world_size, args.asked_by, args.perturb_reference)
    results: list[Result] = [
        ("process group", "PASS", f"rank {job.rank} of {job.world}, {dist.get_backend()}")
    ]
    checks: list[Check] = torch_checks(job)
    missing = [
        name
        for name in ("accel_ops", "accel_core")
        if not agree(job, importlib.util.find_spec(name) is not None)
    ]
    if "accel_ops" not in missing:
        checks += ops_checks(job)
    if "accel_core" not in missing:
        checks += core_checks(job)
    results += [run_check(name, check) for name, check in checks]
    gc.collect()  # the prepared DDP models hold the process group: free them first
    everyone = all_gather_json(job, results)
    if job.rank == 0:
        report(everyone, missing, job.world)
    dist.destroy_process_group()
    return 1 if any_failed(everyone) else 0
