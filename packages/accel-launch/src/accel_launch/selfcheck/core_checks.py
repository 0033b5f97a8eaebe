"""The checks of accel-core: the training check, then ``gather_for_metrics``.

Only built when accel-core is importable on every rank. Both checks share one ``Accelerator``,
made by the first check that runs. ``gather_for_metrics`` on several processes goes through
torch's object collectives, which need numpy: without numpy on every rank it is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from accel_launch.selfcheck.checks import Check, CheckSkipped, Job, expect_equal
from accel_launch.selfcheck.process_group import agree
from accel_launch.selfcheck.training_check import check_training

if TYPE_CHECKING:
    from accel_core import Accelerator


def _numpy_works() -> bool:
    """Whether numpy imports (torch's object collectives unpickle through it)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def core_checks(job: Job) -> list[Check]:
    """accel-core: training steps against a single-process run, and gather_for_metrics."""
    made: list[Accelerator] = []

    def accelerator() -> Accelerator:
        if not made:
            from accel_core import Accelerator

            made.append(Accelerator())
        return made[0]

    def training() -> str:
        return check_training(job, accelerator())

    def gather_for_metrics() -> str:
        if not agree(job, _numpy_works()) and job.world > 1:
            raise CheckSkipped(
                "on several processes it needs numpy (torch's object collectives); "
                "pip install numpy"
            )
        acc = accelerator()
        n = 2 * job.world + 1
        loader = acc.prepare(torch.utils.data.DataLoader(torch.arange(n), batch_size=2))
        try:
            got = torch.cat([acc.gather_for_metrics(batch).cpu() for batch in loader])
        finally:
            acc.free_memory()
        expect_equal(f"the {n} samples of the data set", torch.arange(n), got)
        return f"{n} samples sharded over {job.world}, gathered once each in order"

    return [
        ("accel_core.Accelerator training", training),
        ("accel_core.Accelerator.gather_for_metrics", gather_for_metrics),
    ]
