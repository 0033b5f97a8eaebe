"""Building a prepared loader as its plain class or as its torchdata-based stateful counterpart.

``build_loader(DataLoaderShard, dataset, ..., use_stateful_dataloader=True)`` builds the class that
``loader_class(DataLoaderShard, use_stateful_dataloader=True)`` names
(:class:`~accel_core.data_loader.stateful.StatefulDataLoaderShard`); accel's own code builds its
loaders this way. The stateful classes (and torchdata) are imported only when one is asked for.

This module sits above the loaders and :mod:`accel_core.data_loader.stateful`; it registers
:func:`stateful_counterpart` with :mod:`accel_core.data_loader.loader_state`, so that Accelerate's
spelling ``DataLoaderShard(..., use_stateful_dataloader=True)`` makes the same choice without the
loaders importing upward (see that module's docstring for why a ``__new__`` remains).
"""

from __future__ import annotations

from typing import Any, TypeVar

from accel_core.data_loader.loader_state import DataLoaderStateMixin, register_stateful_lookup

LoaderT = TypeVar("LoaderT", bound=DataLoaderStateMixin)


def stateful_counterpart(cls: type) -> type:
    """The class that also is a torchdata ``StatefulDataLoader`` for the loader class ``cls``.

    Raises ImportError with the install line when torchdata is missing, and TypeError when
    ``cls`` is not (a subclass of) ``DataLoaderShard``, ``DataLoaderDispatcher`` or
    ``SkipDataLoader``.
    """
    from accel_core.data_loader.stateful import stateful_class

    return stateful_class(cls)


def loader_class(cls: type[LoaderT], use_stateful_dataloader: bool = False) -> type[LoaderT]:
    """``cls``, or its stateful counterpart when ``use_stateful_dataloader`` is true."""
    if use_stateful_dataloader and not cls._stateful:
        return stateful_counterpart(cls)
    return cls


def build_loader(
    cls: type[LoaderT], *args: Any, use_stateful_dataloader: bool = False, **kwargs: Any
) -> LoaderT:
    """A ``cls`` built from ``args`` and ``kwargs``: an instance of its stateful counterpart
    (:func:`loader_class`) when ``use_stateful_dataloader`` is true."""
    return loader_class(cls, use_stateful_dataloader)(*args, **kwargs)


register_stateful_lookup(stateful_counterpart)
