"""Launches of a multi-process workload that times accel and raw PyTorch interleaved in the same
processes (the ND, pipeline and expert-parallel benchmarks): the torchrun command, the launches
themselves, the check that both did the same work, and the median over launches."""

from __future__ import annotations

import statistics
import sys

from harness import json_result

#: How far accel's losses and gradient norms may be from raw's in the same launch (float32).
LOSS_TOLERANCE = 1e-4


def torchrun(python: str, processes: int) -> list[str]:
    """The command that starts ``processes`` local workers under torch's elastic launcher."""
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]


def same_work(launch: dict) -> None:
    """Raise unless accel's losses and gradient norms are raw's (the same work was timed)."""
    for kind in ("losses", "norms"):
        ours, raw = launch[kind]["accel"], launch[kind]["raw"]
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, raw, strict=True))
        if worst > LOSS_TOLERANCE:
            raise RuntimeError(f"accel's {kind} differ from raw's by {worst:.2g}: {ours} vs {raw}")


def accel_and_raw_launches(
    python: str, workload: str, processes: int, steps: int, warmup: int, launches: int, name: str
) -> list[dict]:
    """Run ``workload accel,raw STEPS WARMUP`` ``launches`` times, each checked with
    :func:`same_work`; print each launch's ratio and figures to stderr as ``name: ...``."""
    measured = []
    for _ in range(launches):
        command = [*torchrun(python, processes), workload, "accel,raw", str(steps), str(warmup)]
        measured.append(json_result(command, timeout=900))
        same_work(measured[-1])
    for launch in measured:
        shown = {k: v for k, v in launch.items() if k not in ("losses", "norms", "runs")}
        ratio = launch["accel"] / launch["raw"]
        print(f"{name}: launch accel / raw {ratio:.3f}: {shown}", file=sys.stderr)
    return measured


def median_ms(measured: list[dict], impl: str) -> float:
    """The median over launches of ``impl``'s seconds per step, in milliseconds."""
    return 1000 * statistics.median(launch[impl] for launch in measured)
