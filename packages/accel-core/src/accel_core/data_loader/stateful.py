"""``use_stateful_dataloader=True``: prepared loaders that are torchdata ``StatefulDataLoader`` s.

Building :class:`~accel_core.data_loader.DataLoaderShard`,
:class:`~accel_core.data_loader.DataLoaderDispatcher` or
:class:`~accel_core.data_loader.SkipDataLoader` with ``use_stateful_dataloader=True`` gives an
instance of the matching class here (``stateful_class``, reached through
:mod:`accel_core.data_loader.factory`), so ``isinstance`` holds for both the accel class and
``StatefulDataLoader``. This module sits above the loaders: none of them imports it.

``state_dict()`` is the position after the batches the training loop has received, in torchdata's
format. The shard and the dispatcher read one batch ahead (to know which batch is the last), so
the position is recorded just before each read-ahead, not taken from the inner iterator at save
time; on the last batch it is marked finished, so that a restored loader starts the next epoch.
``load_state_dict`` makes the next iteration continue inside the epoch, without
``skip_first_batches``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError as error:  # pragma: no cover - exercised only without torchdata
    raise ImportError(
        "use_stateful_dataloader=True needs torchdata's StatefulDataLoader: "
        'pip install "accel-core[stateful]" (or pip install torchdata).'
    ) from error

from accel_core.data_loader.dispatcher import DataLoaderDispatcher
from accel_core.data_loader.progress import LoaderProgress
from accel_core.data_loader.shard_loader import DataLoaderShard
from accel_core.data_loader.skip import SkipDataLoader


class _Restorable:
    """``load_state_dict`` for a loader that is a ``StatefulDataLoader``: the next iteration
    continues from the state, and asks :meth:`_restored` once whether it does."""

    _stateful = True
    _state_loaded = False

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` at the next iteration."""
        self._state_loaded = True
        StatefulDataLoader.load_state_dict(self, state_dict)  # type: ignore[arg-type]

    def _restored(self) -> bool:
        """Whether a state was loaded since the last iteration began (answered once)."""
        loaded, self._state_loaded = self._state_loaded, False
        return loaded


class _ReadAheadPosition(_Restorable):
    """The position of a loader that reads ahead, recorded before each read-ahead.

    An iteration left before its end (a ``break``) keeps its last position: that is where the
    training loop stopped. One that runs to its end forgets it (the loader's own state then says
    the epoch is finished). An abandoned iteration's generator is closed whenever the garbage
    collector gets to it, possibly while a later iteration runs: each iteration therefore owns a
    token, and only the iteration holding the current one may change the position.

    After ``load_state_dict`` the inner loader resumes by itself after the saved batches; the
    loader's progress is told so, and the checkpoint's resume point applies to that iteration.
    """

    _position: dict[str, Any] | None = None
    _iteration: object | None = None
    progress: LoaderProgress

    def _iterate_recording(self, batches: Iterator[Any]) -> Iterator[Any]:
        token = self._iteration = object()
        self._position = None
        yield from batches
        if self._iteration is token:
            self._iteration = None
            self._position = None

    def _before_read_ahead(self) -> None:
        self._position = StatefulDataLoader.state_dict(self)  # type: ignore[arg-type]

    def _batches_already_consumed(self) -> int:
        restored = self._restored()
        resume = self.progress.resume
        if restored and resume is not None:
            return resume.batches
        return super()._batches_already_consumed()  # type: ignore[misc]

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch yielded (torchdata's format)."""
        if self._iteration is not None and self._position is not None:
            state = dict(self._position)
            state["_iterator_finished"] = bool(getattr(self, "end_of_dataloader", False))
            return state
        return StatefulDataLoader.state_dict(self)  # type: ignore[arg-type]


class StatefulDataLoaderShard(_ReadAheadPosition, DataLoaderShard, StatefulDataLoader):
    """A :class:`DataLoaderShard` whose position can be saved and restored mid-epoch."""

    def __iter__(self) -> Iterator[Any]:
        return self._iterate_recording(DataLoaderShard.__iter__(self))


FIRST_SAMPLES_KEY = "_accel_dispatcher_first_samples"
"""Key of a dispatcher's state with several processes: the epoch's first samples, which complete
a short last batch (torchdata's own keys are left as they are)."""


class StatefulDataLoaderDispatcher(_ReadAheadPosition, DataLoaderDispatcher, StatefulDataLoader):
    """A :class:`DataLoaderDispatcher` whose main process saves and restores its position.

    Only the main process reads, so only its ``state_dict()`` holds a position; the others
    return ``{}`` (which ``load_state_dict`` takes as "nothing to restore"): asking torchdata
    for the state of a loader that never iterated would create an iterator, which draws from
    the global random generator. ``save_state`` writes the main process's. With
    several processes the state also holds the epoch's first samples (``FIRST_SAMPLES_KEY``),
    so that a restored epoch completes its short last batch exactly as the uninterrupted one.
    """

    _loaded_first_samples: Any = None

    def __iter__(self) -> Iterator[Any]:
        return self._iterate_recording(DataLoaderDispatcher.__iter__(self))

    def _restored_first_samples(self) -> Any:
        samples, self._loaded_first_samples = self._loaded_first_samples, None
        return samples

    def state_dict(self) -> dict[str, Any]:
        """The position after the last global batch sent (torchdata's format); ``{}`` on the
        processes that don't read."""
        if self.state.process_index != 0 and self._iterator is None:
            return {}
        state = super().state_dict()
        in_epoch = self._iteration is not None and not self.end_of_dataloader
        if in_epoch and self._first_samples is not None and self.state.num_processes > 1:
            state[FIRST_SAMPLES_KEY] = self._first_samples
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` at the next iteration."""
        state = dict(state_dict)
        self._loaded_first_samples = state.pop(FIRST_SAMPLES_KEY, None)
        super().load_state_dict(state)


class StatefulSkipDataLoader(_Restorable, SkipDataLoader, StatefulDataLoader):
    """A :class:`SkipDataLoader` whose position can be saved and restored mid-epoch.

    It reads no batch ahead, so its position is torchdata's own. The iteration that follows a
    ``load_state_dict`` skips nothing: the saved position is already past the skipped batches.
    """

    def _batches_to_skip(self) -> int:
        return 0 if self._restored() else super()._batches_to_skip()


_STATEFUL_CLASSES: dict[type, type] = {
    DataLoaderShard: StatefulDataLoaderShard,
    DataLoaderDispatcher: StatefulDataLoaderDispatcher,
    SkipDataLoader: StatefulSkipDataLoader,
}


def stateful_class(cls: type) -> type:
    """The stateful class to build for ``cls(..., use_stateful_dataloader=True)``.

    One of the classes above for accel's loaders; for a subclass of one of them, a subclass of
    both (made once and kept), so that the subclass's own methods stay in force.
    """
    found = _STATEFUL_CLASSES.get(cls)
    if found is not None:
        return found
    for base in cls.__mro__:
        stateful_base = _STATEFUL_CLASSES.get(base)
        if stateful_base is not None:
            made = type(cls.__name__, (cls, stateful_base), {"_stateful": True})
            made.__module__ = cls.__module__
            _STATEFUL_CLASSES[cls] = made
            return made
    raise TypeError(
        f"use_stateful_dataloader=True: {cls.__name__} is not a DataLoaderShard, "
        "DataLoaderDispatcher or SkipDataLoader."
    )
