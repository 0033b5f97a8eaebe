"""Run by test_multiprocess.test_plain_torchrun under ``python -m torch.distributed.run``."""

import torch

import accel_ops

state = accel_ops.PartialState()
gathered = accel_ops.gather(torch.tensor([state.process_index]))
print(f"torchrun-ok {state.process_index} {state.num_processes} {gathered.tolist()}", flush=True)
state.destroy_process_group()
