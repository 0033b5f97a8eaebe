"""Prepared data loaders of the ``xla`` strategy: every batch on the XLA device.

A :class:`~accel_core.data_loader.DataLoaderShard` puts its batches on the device it is given:
the XLA device. A :class:`~accel_core.data_loader.DataLoaderDispatcher` (iterable datasets)
broadcasts each batch from the main process on the process group's device (CPU under gloo,
which can't read XLA memory), so it becomes an :class:`XLADataLoaderDispatcher`, which moves each
batch to the XLA device after that broadcast.

The loaders are iterated on the training thread, not by torch_xla's ``MpDeviceLoader`` (which
Hugging Face Accelerate wraps them in): its loader thread runs the prepared loader up to 24
batches ahead of the training loop. Measured on a 10-batch epoch: the thread had finished the
epoch while the loop was on its first batch, so the loop never saw ``end_of_dataloader`` (the forced
accumulation step on the last batch never came) and the loader's batch count (the position
``save_state`` records) read 0 throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel_core.data_loader import DataLoaderDispatcher


class XLADataLoaderDispatcher(DataLoaderDispatcher):
    """A dispatcher whose batches are moved to ``xla_device`` once they are broadcast."""

    xla_device: torch.device

    def __iter__(self) -> Iterator[Any]:
        from accel_ops import send_to_device

        for batch in super().__iter__():
            yield send_to_device(batch, self.xla_device)


def on_xla_device(dataloader: DataLoader[Any], device: torch.device) -> DataLoader[Any]:
    """``dataloader`` (the same object) yielding its batches on ``device``.

    A dispatcher's class becomes :class:`XLADataLoaderDispatcher` (a subclass adding only
    ``__iter__``, so every attribute and the loader's identity are kept); any other prepared
    loader with a ``device`` attribute gets ``device``, whatever its ``device_placement`` was: an
    XLA model can't read CPU batches.
    """
    if isinstance(dataloader, DataLoaderDispatcher):
        if not isinstance(dataloader, XLADataLoaderDispatcher):
            dataloader.__class__ = XLADataLoaderDispatcher
        dataloader.xla_device = device
    elif hasattr(dataloader, "device"):
        dataloader.device = device
    return dataloader
