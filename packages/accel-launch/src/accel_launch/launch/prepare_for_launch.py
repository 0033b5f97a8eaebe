"""``PrepareForLaunch``: a function made ready to run as one of several forked processes.

Accelerate's notebook and debug launchers wrap the training function in it; each started process
calls it with its index. It sets the variables torch.distributed reads for that process, or, in
debug mode, joins a gloo process group through a file store.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from accel_launch.launch.engines import distributed_types

#: Distributed types whose processes get ``LOCAL_RANK`` and ``RANK`` from their index.
MULTI_PROCESS_TYPES = frozenset(
    {
        "MULTI_GPU",
        "MULTI_CPU",
        "MULTI_MLU",
        "MULTI_MUSA",
        "MULTI_NPU",
        "MULTI_XPU",
        "MULTI_SDAA",
        "MULTI_HPU",
        "MULTI_NEURON",
    }
)
#: Accelerate's other distributed types a notebook launch may name; the installed engines add
#: theirs.
_OTHER_TYPES = frozenset({"NO", "MEGATRON_LM"})


class PrepareForLaunch:
    """Wrap ``launcher`` so that process ``index`` of a launch can call it.

    Args:
        launcher: the function to run.
        distributed_type: Accelerate's distributed type name (``NO``, ``MULTI_CPU``,
            ``MULTI_GPU``, ...), or its enum member.
        debug: join a gloo group of ``WORLD_SIZE`` processes through the file store
            ``ACCELERATE_DEBUG_RDV_FILE`` instead.

    Raises ``ValueError`` for an unknown distributed type.
    """

    def __init__(
        self, launcher: Callable[..., object], distributed_type: str = "NO", debug: bool = False
    ) -> None:
        kind = str(getattr(distributed_type, "value", distributed_type))
        known = MULTI_PROCESS_TYPES | _OTHER_TYPES | set(distributed_types())
        if kind not in known:
            raise ValueError(
                f"{distributed_type!r} is not a distributed type; expected one of "
                f"{', '.join(sorted(known))}"
            )
        self.launcher = launcher
        self.distributed_type = kind
        self.debug = debug

    def __call__(self, index: int, *args: object) -> None:
        """Set up process ``index`` (``RANK = NPROC * NODE_RANK + index``), then run the launcher
        with ``args``; ``FORK_LAUNCHED=1`` tells it that it runs in a forked process."""
        if self.debug:
            import torch.distributed as dist

            world_size = int(os.environ["WORLD_SIZE"])
            store = dist.FileStore(os.environ["ACCELERATE_DEBUG_RDV_FILE"], world_size)
            dist.init_process_group("gloo", rank=index, store=store, world_size=world_size)
        elif self.distributed_type in MULTI_PROCESS_TYPES:
            os.environ["LOCAL_RANK"] = str(index)
            processes = int(os.environ.get("NPROC", 1))
            node_rank = int(os.environ.get("NODE_RANK", 0))
            os.environ["RANK"] = str(processes * node_rank + index)
        os.environ["FORK_LAUNCHED"] = "1"
        self.launcher(*args)
