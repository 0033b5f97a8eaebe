"""A process group of one process, for engines that need a group even when nothing was launched
(``python train.py``): FSDP and DeepSpeed strategies form it in ``setup_environment`` and destroy
it in ``teardown``."""

from __future__ import annotations

import torch


def form_one_process_group(device: torch.device) -> None:
    """Form the default process group of this process alone, over an in-memory store (no port):
    gloo for a CPU device, else torch's default for the device (on CUDA NCCL plus gloo, so CPU
    tensors can be exchanged too)."""
    backend = "gloo" if device.type == "cpu" else None
    store = torch.distributed.HashStore()
    torch.distributed.init_process_group(backend, store=store, rank=0, world_size=1)


def destroy_own_group(formed: bool) -> None:
    """Destroy the default group if this strategy ``formed`` it and it still exists."""
    if formed and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
