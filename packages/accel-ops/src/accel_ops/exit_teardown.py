"""Tear the process group down at interpreter exit, so that a finished job exits 0.

Why: a gloo process group that is still alive when the interpreter shuts down is destroyed by
C++ static destructors while its background threads still run; ``std::thread``'s destructor then
calls ``std::terminate`` ("terminate called without an active exception") and the process dies
by SIGABRT although the script finished. Measured on 2 CPU processes: 6 of 15 bare-torch runs
without ``destroy_process_group()`` abort, 0 of 15 with it.

What: the first :class:`~accel_ops.PartialState` of a process registers :func:`teardown` with
``atexit``. It runs after the script ended, normally or by an exception (whose traceback has
already been printed, and whose exit code is kept), writes the hang reporter's final record and
destroys the default process group if one is still initialised. Destroying a gloo group is local:
it waits for no peer, so it is safe when the other ranks have already exited. A user who called
``destroy_process_group()`` (or ``Accelerator.end_training()``) leaves nothing to do.
"""

from __future__ import annotations

import atexit

import torch.distributed as dist

from accel_ops import inflight

_registered = False


def register() -> None:
    """Register :func:`teardown` with ``atexit`` (once per process)."""
    global _registered
    if not _registered:
        atexit.register(teardown)
        _registered = True


def teardown() -> None:
    """Write the final hang record and destroy the default process group if it still exists."""
    inflight.stop_reporter()
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # at exit there is nobody left to tell; the exit code must stay the script's
        pass
