"""A job that waits in a collective: $HANG_MODE says how rank 1 keeps rank 0 waiting.

``sleep``: rank 1 sleeps $HANG_SECONDS outside any collective, then joins rank 0's gather.
``other``: rank 1 waits in a barrier of another group while rank 0 waits in the gather (a
deadlock that ends at the process group timeout). Rank 0 writes its pid to $OUT/ready0 first.
"""

import os
import time

import torch
import torch.distributed as dist

import accel_ops as ao

state = ao.PartialState()
rank = state.process_index
other = dist.new_group([0, 1])
with open(os.path.join(os.environ["OUT"], f"ready{rank}"), "w") as file:
    file.write(str(os.getpid()))
if rank == 1:
    if os.environ["HANG_MODE"] == "sleep":
        time.sleep(float(os.environ["HANG_SECONDS"]))
    else:
        ao.wait_for_everyone(group=other)  # rank 1 waits here
ao.gather(torch.ones(4, 5))  # rank 0 waits here
print(f"rank {rank} done", flush=True)
