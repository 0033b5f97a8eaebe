"""``save_state(async_save=True)``: write a snapshot in a background thread.

The CPU copies of one save are kept and the next asynchronous save copies into them, so only
the first one pays for fresh memory (the price: one CPU copy of the state stays allocated
between saves, until ``end_training`` or ``free_memory``). The thread coordinates the processes
over a gloo group of its own, created once by the first asynchronous save (every process is in
``save_state`` then), so it never interleaves with the training loop's collectives. The next
``save_state``, ``load_state`` and ``end_training`` wait for it; an error in the thread is raised
there, never lost.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from accel_core.checkpointing.commit import write_and_commit
from accel_core.checkpointing.snapshot import Snapshot, staged

if TYPE_CHECKING:
    from accel_core.strategies import Strategy


class BackgroundSaver:
    """At most one checkpoint being written in the background."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._group: Any = None
        #: The copies of the last asynchronous save (see ``snapshot.staged``), reused by the next.
        self.staging: dict[str, Any] | None = None

    def __reduce__(self) -> tuple[type[BackgroundSaver], tuple[()]]:
        # A pickled Accelerator carries no thread, group or staging copies: an idle saver.
        return BackgroundSaver, ()

    def start(self, snapshot: Snapshot, strategy: Strategy) -> None:
        """Write ``snapshot`` in a thread (the caller waited for the previous one)."""
        if snapshot.world_size > 1 and self._group is None:
            self._group = dist.new_group(backend="gloo")
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the pinned copies were made with non_blocking=True
        self.staging = staged(snapshot)
        self._thread = threading.Thread(
            target=self._run, args=(snapshot, strategy), name="accel-async-save", daemon=False
        )
        self._thread.start()

    def _run(self, snapshot: Snapshot, strategy: Strategy) -> None:
        try:
            write_and_commit(snapshot, strategy, self._group)
        except BaseException as error:  # kept for the next wait()
            self._error = error

    @property
    def busy(self) -> bool:
        """Whether a checkpoint is still being written."""
        return self._thread is not None and self._thread.is_alive()

    def release(self) -> None:
        """Wait for the background save, then drop the kept copies."""
        self.wait()
        self.staging = None

    def wait(self) -> None:
        """Block until the background save finished; raise its error if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(
                f"the asynchronous save_state failed in the background: {error}"
            ) from error
