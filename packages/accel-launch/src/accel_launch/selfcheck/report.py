"""Rank 0's report: one line per check, from the results of every rank.

A check's line is rank 0's result, except that a failure on any rank makes it ``FAIL`` with the
ranks that failed and the first of their messages. Then one ``SKIP`` line per package whose
checks did not run, and the verdict.
"""

from __future__ import annotations

from accel_launch.selfcheck.checks import Result

INSTALL_HINT = "pip install accel-ops accel-core"


def any_failed(everyone: list[list[Result]]) -> bool:
    """Whether any check failed on any rank (``everyone[rank]`` is that rank's results)."""
    return any(status == "FAIL" for per_rank in everyone for _, status, _ in per_rank)


def report(everyone: list[list[Result]], missing: list[str], world: int) -> None:
    """Print rank 0's line for each check, or the first failure of another rank."""
    for index, (name, status, detail) in enumerate(everyone[0]):
        bad = [r for r, per_rank in enumerate(everyone) if per_rank[index][1] == "FAIL"]
        if bad and status != "FAIL":
            status, detail = "FAIL", f"failed on ranks {bad}: {everyone[bad[0]][index][2]}"
        elif bad and len(bad) < world:
            detail = f"failed on ranks {bad}: {detail}"
        print(f"{status} {name}: {detail}", flush=True)
    for name in missing:
        print(f"SKIP {name} checks: not installed ({INSTALL_HINT})", flush=True)
    verdict = "some checks FAILED" if any_failed(everyone) else "all checks passed"
    print(f"accel test: {verdict} on {world} process{'es' if world > 1 else ''}.", flush=True)
