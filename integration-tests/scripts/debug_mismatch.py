"""Both ranks gather tensors of different shapes; under --debug both raise the same error."""

import torch

from accel_core import Accelerator

accelerator = Accelerator()
rank = accelerator.process_index
accelerator.gather(torch.ones(rank + 1, 2))  # rank 0 passes 1 row, rank 1 passes 2
