"""No-op job for bare ``torchrun``: join a gloo process group, then exit."""

import torch.distributed as dist

dist.init_process_group("gloo")
dist.destroy_process_group()
