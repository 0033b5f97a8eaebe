"""Worker that reports what it sees: its environment, argv, pid and an all_gather of ranks.

Writes $OUT/rank<RANK>.json. Imports torch only when there are several processes.
"""

import json
import os
import sys

world = int(os.environ.get("WORLD_SIZE", "1"))
gathered = [0]
if world > 1:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    parts = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(parts, torch.tensor([dist.get_rank()]))
    gathered = [int(p.item()) for p in parts]
    dist.destroy_process_group()
keys = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
)
report = {
    "env": {k: v for k, v in os.environ.items() if k.startswith("ACCEL_") or k in keys},
    "argv": sys.argv[1:],
    "name": __name__,
    "pid": os.getpid(),
    "gathered": gathered,
}
rank = os.environ.get("RANK", "0")
with open(os.path.join(os.environ["OUT"], f"rank{rank}.json"), "w") as file:
    json.dump(report, file)
print(f"probe rank {rank} done", flush=True)
