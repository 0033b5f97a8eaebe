"""Every rank merges the same sharded checkpoint, as Accelerate's test_merge_weights does.

Three ranks save a torch.distributed.checkpoint folder, then each calls Accelerate's
``merge_command`` on it and reads the merged file back at once. Each rank prints
``writes=<n> inode=<i> weight_ok=<bool>``: how many times it wrote the file (counted around
safetensors' ``save_file``) and what it read after ``merge_command`` returned.
"""

import os
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from accel_launch.commands.merge_cmd import merge_command, merge_command_parser

writes = 0
real_save_file = safetensors.torch.save_file


def counting_save_file(*args, **kwargs):
    global writes
    writes += 1
    return real_save_file(*args, **kwargs)


safetensors.torch.save_file = counting_save_file

dist.init_process_group("gloo")
out = Path(os.environ["OUT"])
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
weight = torch.arange(6 * 1024, dtype=torch.float32).reshape(6, 1024)
dcp.save({"model": {"w": distribute_tensor(weight, mesh, [Shard(0)])}}, checkpoint_id=out / "ckpt")
args = merge_command_parser().parse_args([str(out / "ckpt"), str(out)])
written = merge_command(args)
merged = load_file(str(written))
ok = sorted(merged) == ["w"] and torch.equal(merged["w"], weight)
print(f"writes={writes} inode={os.stat(written).st_ino} weight_ok={ok}", flush=True)
dist.destroy_process_group()
