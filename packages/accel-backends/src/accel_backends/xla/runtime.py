"""torch_xla for the ``xla`` strategy: finding it, and checking the replica world it runs in.

torch_xla is an optional engine (``pip install 'accel-backends[xla]'``, which needs the torch
version the torch_xla wheel was built for). It is imported only when the strategy is set up; the
strategy's constructor only checks that it can be.

Which replica worlds run, measured with torch 2.9.1 and torch_xla 2.9.0:

- one process on one XLA device: every PJRT device (``PJRT_DEVICE=CPU`` included);
- SPMD (``XLAStrategy(spmd=True)``): one process driving every device of the host, also on CPU
  with ``CPU_NUM_DEVICES=2``;
- several replicas on the CPU device do not: under ``torch_xla.launch`` with
  ``CPU_NUM_DEVICES=2`` each replica is a thread of one process, and their first all-reduce
  aborts the process after 10 s ("rendezvous.cc: Termination timeout for `all reduce` ...
  Expected 2 threads to join the rendezvous, but only 1 of them arrived on time"): the two
  threads compile the same graph concurrently and get collectives of different ``op_id``;
- ``torchrun`` with several processes on the CPU device gives each process an XLA world of its
  own (``xr.world_size() == 1`` in every one): nothing would average their gradients.

:func:`check_world` turns the last two into errors before any model is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_backends.errors import ENGINE_INSTALL, EngineNotInstalledError


def require_torch_xla(what: str) -> None:
    """Check, without importing it, that torch_xla can be imported for ``what``: an error with
    the install line when it is missing or switched off with ``USE_TORCH_XLA=0``."""
    import importlib.util

    from accel_ops import USE_TORCH_XLA

    if not USE_TORCH_XLA:
        raise EngineNotInstalledError(
            f"{what} needs torch_xla, and USE_TORCH_XLA=0 turns it off in this process: unset "
            f"USE_TORCH_XLA (torch_xla is installed with {ENGINE_INSTALL['torch_xla']})"
        )
    if importlib.util.find_spec("torch_xla") is None:
        raise EngineNotInstalledError(
            f"{what} needs torch_xla, which is not installed: {ENGINE_INSTALL['torch_xla']} "
            "(torch_xla needs the torch version its wheel was built for)"
        )


@dataclass(frozen=True)
class ReplicaWorld:
    """The replicas torch_xla's runtime sees from this process."""

    replicas: int
    ordinal: int
    device_type: str
    spmd: bool

    @classmethod
    def current(cls) -> ReplicaWorld:
        """Ask torch_xla's runtime (``xr.world_size``, ``xr.global_ordinal``...)."""
        import torch_xla.runtime as xr

        return cls(
            replicas=int(xr.world_size()),
            ordinal=int(xr.global_ordinal()),
            device_type=str(xr.device_type()),
            spmd=bool(xr.is_spmd()),
        )


def check_world(world: ReplicaWorld, num_processes: int, process_index: int) -> None:
    """Raise ``RuntimeError`` when the job can't train correctly (or at all) as launched.

    ``num_processes`` / ``process_index`` are what accel's process state holds (from ``RANK`` and
    ``WORLD_SIZE``); they must be torch_xla's replica count and ordinal.
    """
    if world.replicas > 1 and world.device_type == "CPU":
        raise RuntimeError(
            f"strategy 'xla': torch_xla runs {world.replicas} replicas on its CPU device, and "
            "XLA's CPU all-reduce deadlocks between them (torch_xla 2.9 aborts after 10 s: "
            "'Expected 2 threads to join the rendezvous'). On CPU, train with one process "
            "(PJRT_DEVICE=CPU, no CPU_NUM_DEVICES) or over several CPU devices of one process "
            "with XLAStrategy(spmd=True); several replicas need TPUs or GPUs."
        )
    if num_processes != world.replicas or process_index != world.ordinal:
        raise RuntimeError(
            f"strategy 'xla': this job has {num_processes} process(es) (WORLD_SIZE; this is "
            f"rank {process_index}), but torch_xla sees {world.replicas} replica(s) on "
            f"{world.device_type} (this is ordinal {world.ordinal}). "
            + (
                "Each process would train alone: torch_xla's CPU device gives every process its "
                "own world. Launch one process (accel launch --use_xla --num_processes 1), or "
                "use XLAStrategy(spmd=True) for several CPU devices."
                if world.device_type == "CPU"
                else "Start the replicas with torchrun or accel launch --use_xla, so that accel "
                "and torch_xla count the same processes (torch_xla.launch / xmp.spawn start "
                "replicas accel does not see)."
            )
        )
