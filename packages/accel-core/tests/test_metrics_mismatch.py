"""gather_for_metrics on the last batch: tensors that differ beyond dim 0 are an error on every
rank (2 real gloo processes), and uneven lengths alone still gather exactly."""

from __future__ import annotations

import json

import pytest

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def last_batch_worker():
    import torch
    from torch.utils.data import DataLoader

    from accel_core import Accelerator
    from accel_core.configuration import DataLoaderConfiguration
    from accel_ops import DistributedOperationException

    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    rank = accelerator.process_index
    loader = accelerator.prepare(DataLoader(torch.arange(7.0), batch_size=2))
    report = {}
    for index, batch in enumerate(loader):
        # rank 0 gets [0, 1] then [4, 5]; rank 1 gets [2, 3] then [6]
        last = index == len(loader) - 1
        if not last:
            gathered = accelerator.gather_for_metrics(batch)
            report["first"] = gathered.tolist()
            continue
        wide = torch.zeros(len(batch), 2 + rank)  # the second dimension differs
        try:
            accelerator.gather_for_metrics(wide)
            report["mismatch"] = "no error"
        except DistributedOperationException as error:
            report["mismatch"] = str(error)
        report["uneven"] = accelerator.gather_for_metrics(batch).tolist()
    print("REPORT " + json.dumps(report), flush=True)


def test_last_batch_that_differs_beyond_dim_0_raises_on_every_rank():
    results = run_workers(2, function=f"{__file__}::last_batch_worker", timeout=120)
    for result in results:
        line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
        report = json.loads(line[len("REPORT ") :])
        assert report["first"] == [0.0, 1.0, 2.0, 3.0]
        assert report["mismatch"].startswith("gather_for_metrics: the ranks passed tensors that")
        assert "rank 0: (*, 2) float32" in report["mismatch"]
        assert "rank 1: (*, 3) float32" in report["mismatch"]
        assert report["uneven"] == [4.0, 5.0, 6.0]
