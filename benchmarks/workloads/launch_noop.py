"""No-op job for ``accel launch``: create the process state, then exit.

Uses accel_ops.PartialState when accel-ops is installed, else torch.distributed directly.
"""

import importlib.util

if importlib.util.find_spec("accel_ops") is not None:
    from accel_ops import PartialState

    PartialState()
else:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.destroy_process_group()
