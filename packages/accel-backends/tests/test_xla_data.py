"""Prepared data loaders under the ``xla`` strategy yield their batches on the XLA device.

Needs torch_xla (the ``backend-xla`` session, ``PJRT_DEVICE=CPU``); skipped elsewhere.
"""

from __future__ import annotations

import pytest

torch_xla = pytest.importorskip("torch_xla")
torch_xla.device()  # the XLA runtime must start before any backward pass of the process

import torch  # noqa: E402
from xla_support import make_dataset, xla_accelerator  # noqa: E402

from accel_backends.xla.loaders import XLADataLoaderDispatcher  # noqa: E402
from accel_core.data_loader import DataLoaderShard, skip_first_batches  # noqa: E402


class _Numbers(torch.utils.data.IterableDataset):
    """0, 1, ..., 6 as 2-element float tensors (an iterable dataset: dispatched batches)."""

    def __iter__(self):
        for value in range(7):
            yield {"x": torch.full((2,), float(value)), "label": torch.tensor(value)}


@pytest.mark.parametrize("placement", [True, False])
def test_map_style_batches_arrive_on_the_xla_device(placement):
    """Whatever ``device_placement`` says: an XLA model can't read CPU batches."""
    dataset = make_dataset(samples=10)
    with xla_accelerator(device_placement=placement) as accelerator:
        loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=4))
        assert isinstance(loader, DataLoaderShard)
        assert len(loader) == 3 and loader.total_batch_size == 4
        flags, seen = [], []
        for inputs, targets in loader:
            assert inputs.device.type == targets.device.type == "xla"
            seen.append(inputs.cpu())
            flags.append(accelerator.gradient_state.end_of_dataloader)
        assert flags == [False, False, True]
        assert torch.equal(torch.cat(seen), dataset.tensors[0])
        assert accelerator.gradient_state.active_dataloader is None


def test_iterable_datasets_are_dispatched_then_moved_to_the_xla_device():
    with xla_accelerator() as accelerator:
        loader = accelerator.prepare(torch.utils.data.DataLoader(_Numbers(), batch_size=3))
        assert isinstance(loader, XLADataLoaderDispatcher)
        batches = list(loader)
        assert [b["x"].device.type for b in batches] == ["xla"] * 3
        assert [b["label"].cpu().tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
        assert torch.equal(batches[2]["x"].cpu(), torch.full((1, 2), 6.0))
        # The same object again (iterating twice, preparing keeps one loader).
        assert len(list(loader)) == 3 and accelerator._dataloaders == [loader]


def test_skip_first_batches_keeps_the_xla_device():
    dataset = make_dataset(samples=12)
    with xla_accelerator() as accelerator:
        loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=4))
        skipped = skip_first_batches(loader, 1)
        batches = [inputs for inputs, _ in skipped]
        assert len(batches) == 2 and batches[0].device.type == "xla"
        assert torch.equal(batches[0].cpu(), dataset.tensors[0][4:8])


def test_gather_for_metrics_returns_every_sample_once():
    dataset = make_dataset(samples=10)
    with xla_accelerator() as accelerator:
        loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=4))
        gathered = [accelerator.gather_for_metrics(targets) for _, targets in loader]
        assert all(g.device.type == "xla" for g in gathered)
        assert torch.equal(torch.cat([g.cpu() for g in gathered]), dataset.tensors[1])
