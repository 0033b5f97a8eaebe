"""Hugging Face Accelerate's side of the checkpoint-compatibility test (run by its interpreter).

    python accelerate_checkpoint_job.py RECORDS NAME --seed N [--load DIR] [--save DIR]

The job of ``checkpoint_workload.py`` with Accelerate's ``Accelerator`` (one process, or under
``torch.distributed.run``). After saving, rank 0 also pickles the loader's
``SeedableRandomSampler`` into ``RECORDS/sampler.bin`` the way Accelerate's
``save_accelerator_state`` does (``torch.save`` of the object): Accelerate 1.15 itself writes one
only for an ``IterableDatasetShard``, never for a map-style dataset like this one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DataLoaderConfiguration

sys.path.insert(0, str(Path(__file__).parent))
import checkpoint_workload as work


def pickle_sampler(accelerator: Any, parts: work.Parts, records: Path) -> dict[str, Any]:
    """``RECORDS/sampler.bin`` at epoch SAMPLER_EPOCH; its seed, epoch and order for that epoch."""
    if not accelerator.is_main_process:
        return {}
    sampler = parts.loader.get_sampler()
    if type(sampler).__module__ != "accelerate.data_loader":
        raise TypeError(f"expected accelerate's SeedableRandomSampler, got {type(sampler)}")
    sampler.set_epoch(work.SAMPLER_EPOCH)
    order = list(sampler)  # iterating moves it on to the next epoch
    sampler.set_epoch(work.SAMPLER_EPOCH)
    torch.save(sampler, records / "sampler.bin")
    pickled = {"epoch": sampler.epoch, "initial_seed": sampler.initial_seed, "order": order}
    return {"pickled_sampler": pickled}


if __name__ == "__main__":
    work.main(Accelerator, DataLoaderConfiguration, after_save=pickle_sampler)
