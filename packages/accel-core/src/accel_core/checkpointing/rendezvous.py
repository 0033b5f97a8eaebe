"""A named meeting point of every process, through the process group's key-value store.

``save_state`` starts with one and ``load_state`` holds one once each process has checked its
share of the checkpoint: if a process never arrives (it took a branch that skipped the call, or
died), every arrived process gets an error after the collective timeout naming the call and the
missing ranks, instead of hanging inside a mismatched collective. A process may bring a report
(``load_state``: what its check found wrong); every process leaves with all of them.
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import torch.distributed as dist

from accel_ops import inflight

_sequence = itertools.count()
_DEFAULT_TIMEOUT = 1800.0


def meet(
    operation: str,
    rank: int,
    world_size: int,
    timeout_seconds: float | None,
    report: str | None = None,
) -> list[str]:
    """Return once all ``world_size`` processes called ``meet`` for their n-th time: the
    ``report`` of each process that brought one, in rank order (empty when none did).

    Raises ``RuntimeError`` naming ``operation`` and the ranks that did not arrive in time.
    """
    store = _store()
    key = f"accel/meet/{next(_sequence)}/{operation}"
    timeout = timeout_seconds or _DEFAULT_TIMEOUT
    with inflight.waiting_in(operation, f"waiting for {world_size} processes"):
        store.set(f"{key}/rank{rank}", "" if report is None else f"report:{report}")
        if report is not None:
            store.add(f"{key}/reports", 1)  # before the count: counted once everyone arrived
        if store.add(f"{key}/count", 1) == world_size:
            store.set(f"{key}/done", "1")
        try:
            store.wait([f"{key}/done"], datetime.timedelta(seconds=timeout))
        except RuntimeError as error:  # the store's timeout (DistStoreError is a RuntimeError)
            missing = [r for r in range(world_size) if not store.check([f"{key}/rank{r}"])]
            raise RuntimeError(
                f"{operation} on rank {rank} of {world_size}: rank(s) {missing} did not call "
                f"{operation} within {timeout:g} s. Every process must call {operation} (do "
                "not put it under `if accelerator.is_main_process:`; it writes from the right "
                f"processes itself). store said: {error}"
            ) from None
        if store.add(f"{key}/reports", 0) == 0:
            return []
        values = store.multi_get([f"{key}/rank{r}" for r in range(world_size)])
    return [v.decode().removeprefix("report:") for v in values if v.startswith(b"report:")]


def _store() -> Any:
    store = dist.distributed_c10d._get_default_store()
    if store is None:
        raise RuntimeError("no process group store: the process group is not initialised")
    return store
