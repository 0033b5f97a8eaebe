"""The distributed self-check that ``accel test`` launches (also runnable by ``accel launch``).

Every process runs the same checks, in the same order; each compares what it got with a value
known in advance and raises :class:`CheckFailed` (expected vs got) when they differ. Rank 0 prints
one line per check: ``PASS name: what was compared``, ``FAIL name: ... expected X, got Y`` (also
when only another rank failed) or ``SKIP name: why``. Exit code 1 when any check failed on any
rank, else 0.

The checks, in order:

1. the process group: the world size equals the one asked for (``--world-size``, which
   ``accel test`` resolves from its flags and config; else the launcher's ``WORLD_SIZE``), and
   torch.distributed's all_reduce, all_gather, broadcast and barrier give their known results;
2. accel-ops, when importable: ``PartialState``'s view of the job, gather, broadcast, reduce,
   pad_across_processes and drop_duplicated_tail on per-rank tensors with known results;
3. accel-core, when importable: a few training steps under ``Accelerator`` must lower the loss
   and reach the weights of a plain single-process run on the global batch, computed locally on
   every rank; and ``gather_for_metrics`` must return a sharded data set once, in order.

Which optional checks run is agreed on by all ranks (a rank that skipped a collective would leave
the others waiting). The results travel as byte tensors, not pickles: torch's object collectives
need numpy, and so does ``gather_for_metrics`` on several processes, which is skipped without it.

The modules: :mod:`.checks` (what a check is and reports), :mod:`.process_group` (joining the
group, agreeing across ranks), :mod:`.torch_checks`, :mod:`.ops_checks`, :mod:`.core_checks` and
:mod:`.training_check` (the checks), :mod:`.report` (rank 0's lines), :mod:`.run` (``main``) and
:mod:`.__main__` (the program ``accel test`` launches by its path).
"""

from __future__ import annotations

from accel_launch.selfcheck.checks import (
    Check,
    CheckFailed,
    CheckSkipped,
    Job,
    Result,
    expect_equal,
    run_check,
)
from accel_launch.selfcheck.report import INSTALL_HINT, report
from accel_launch.selfcheck.run import main
from accel_launch.selfcheck.training_check import (
    ATOL,
    RTOL,
    STEPS,
    compare_weights,
    fresh_model,
    reference_run,
)

__all__ = [
    "ATOL",
    "INSTALL_HINT",
    "RTOL",
    "STEPS",
    "Check",
    "CheckFailed",
    "CheckSkipped",
    "Job",
    "Result",
    "compare_weights",
    "expect_equal",
    "fresh_model",
    "main",
    "reference_run",
    "report",
    "run_check",
]
