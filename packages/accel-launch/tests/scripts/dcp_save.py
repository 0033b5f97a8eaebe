"""Two ranks save a sharded torch.distributed.checkpoint (DTensor shards, as FSDP 2 writes)."""

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
weight = torch.arange(24, dtype=torch.float32).reshape(6, 4)
state = {
    "model": {
        "layer.weight": distribute_tensor(weight, mesh, [Shard(0)]),
        "layer.bias": torch.full((4,), 0.5),
        "head": {
            "scale": distribute_tensor(torch.arange(4, dtype=torch.float16), mesh, [Shard(0)])
        },
    }
}
dcp.save(state, checkpoint_id=os.environ["OUT"])
dist.destroy_process_group()
