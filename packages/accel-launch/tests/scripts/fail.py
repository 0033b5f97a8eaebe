"""Rank 1 prints a few lines and raises; every other rank sleeps until it is stopped."""

import os
import time

rank = int(os.environ["RANK"])
if rank == 1:
    for step in range(3):
        print(f"step {step} on rank 1", flush=True)
    with open(os.path.join(os.environ["OUT"], "failed_at"), "w") as file:
        file.write(str(time.time()))
    raise ValueError("loss is nan at step 3")
with open(os.path.join(os.environ["OUT"], f"sleeper{rank}"), "w") as file:
    file.write(str(os.getpid()))
time.sleep(120)
