"""A short job with no teardown of its own: state, one gather, exit. ``RAISE_ON_RANK`` raises."""

import os

import torch

from accel_core import Accelerator

accelerator = Accelerator()
rank = accelerator.process_index
gathered = accelerator.gather(torch.tensor([rank]))
assert gathered.tolist() == list(range(accelerator.num_processes)), gathered
if os.environ.get("RAISE_ON_RANK") == str(rank):
    raise RuntimeError(f"rank {rank} raises on purpose")
print(f"rank {rank} finished", flush=True)
