"""``use_stateful_dataloader=True``: a sharded loader built on torchdata's ``StatefulDataLoader``.

Its ``state_dict()`` is the position after the batches the training loop has received. The
prepared loader reads one batch ahead (to know which batch is the last), so the state is taken
just before each read-ahead, not from the inner loader at save time. ``load_state_dict`` makes the
next iteration continue inside the epoch, without ``skip_first_batches``.
"""

from __future__ import annotations

from typing import Any

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError as error:  # pragma: no cover - exercised only without torchdata
    raise ImportError(
        "use_stateful_dataloader=True needs torchdata's StatefulDataLoader: "
        'pip install "accel-core[stateful]" (or pip install torchdata).'
    ) from error

from accel_core.data_loader.shard_loader import DataLoaderShard


class StatefulDataLoaderShard(DataLoaderShard, StatefulDataLoader):
    """A :class:`DataLoaderShard` whose position can be saved and restored mid-epoch."""

    _stateful = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._position: dict[str, Any] | None = None
        self._state_loaded = False
        super().__init__(*args, **kwargs)

    def _batches_already_consumed(self) -> int:
        # After load_state_dict the inner loader resumes by itself, after the saved batches.
        loaded, self._state_loaded = self._state_loaded, False
        resume = self.progress.resume
        if loaded and resume is not None:
            return resume.batches
        return super()._batches_already_consumed()

    def _before_read_ahead(self) -> None:
        self._position = StatefulDataLoader.state_dict(self)

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch this loader yielded (torchdata's format)."""
        if self.progress.in_epoch and self._position is not None:
            return self._position
        return StatefulDataLoader.state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` at the next iteration."""
        self._position = None
        self._state_loaded = True
        StatefulDataLoader.load_state_dict(self, state_dict)
