"""What every prepared loader shares: registration with GradientState and DataLoader settings.

This module is the bottom of the data-loader package: it imports none of the other modules.

Why :class:`DataLoaderStateMixin` keeps a ``__new__``: Accelerate's spelling
``DataLoaderShard(dataset, ..., use_stateful_dataloader=True)`` must give an instance that is also
a torchdata ``StatefulDataLoader``, so that class call has to return an instance of another class
(the stateful counterpart). Python lets a class call do that in only two places: the class's
``__new__`` or its metaclass's ``__call__``. A metaclass would be the heavier hook (every subclass
gets it, and a user subclass mixing in a class with another metaclass fails with a metaclass
conflict), so ``__new__`` stays, reduced to one lookup. The choice itself is an explicit factory,
:func:`accel_core.data_loader.factory.build_loader`, which accel's own code calls; the stateful
classes are subclasses of the loaders (they sit above them), so the factory registers its lookup
here (:func:`register_stateful_lookup`) instead of this module importing upward.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader

from accel_core.gradient_state import GradientState

# DataLoader arguments that the prepared loaders set themselves from the (sharded) sampler.
_SAMPLING_ARGUMENTS = frozenset(
    {"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"}
)


def dataloader_kwargs(dataloader: DataLoader) -> dict[str, Any]:
    """The loading settings of ``dataloader`` (workers, collate_fn, pin_memory, generator...).

    Every ``DataLoader.__init__`` argument of the installed torch except the ones that choose the
    samples, read back from the loader's attributes, so a rebuilt loader loads the same way.
    """
    names = inspect.signature(DataLoader.__init__).parameters
    return {
        name: getattr(dataloader, name)
        for name in names
        if name not in _SAMPLING_ARGUMENTS and hasattr(dataloader, name)
    }


#: The stateful counterpart of a loader class; registered by accel_core.data_loader.factory,
#: which the package imports.
_stateful_lookup: Callable[[type], type] | None = None


def register_stateful_lookup(lookup: Callable[[type], type]) -> None:
    """Make ``cls(..., use_stateful_dataloader=True)`` build ``lookup(cls)`` instead of ``cls``."""
    global _stateful_lookup
    _stateful_lookup = lookup


class _ThisLoader:
    """``base_dataloader``: the instance it is read on; an AttributeError on the class."""

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            name = owner.__name__
            raise AttributeError(f"type object {name!r} has no attribute 'base_dataloader'")
        return instance


class DataLoaderStateMixin:
    """Tracks the end of iteration and the size of the last batch, and tells ``GradientState``.

    A loader using it calls ``begin()`` when an iteration starts and ``end()`` when it stops, and
    sets ``end_of_dataloader`` just before yielding its last batch.

    Building one with ``use_stateful_dataloader=True`` gives an instance of its stateful
    subclass (:mod:`accel_core.data_loader.stateful`), which is also a torchdata
    ``StatefulDataLoader``: ``DataLoaderShard(..., use_stateful_dataloader=True)`` is a
    ``DataLoaderShard`` whose ``state_dict()`` / ``load_state_dict()`` resume inside the epoch.
    :func:`accel_core.data_loader.factory.build_loader` makes the same choice explicitly; the
    module docstring says why ``__new__`` still makes it for a direct class call.

    Attributes:
        end_of_dataloader: the batch just yielded is the last one of this iteration.
        remainder: real samples in the last global batch (0 when full, -1 when unknown).
    """

    end_of_dataloader: bool = False
    remainder: int = -1
    gradient_state: GradientState
    _drop_last: bool = False
    #: True in the torchdata-based subclasses.
    _stateful = False

    def __new__(cls, *args: Any, use_stateful_dataloader: bool = False, **kwargs: Any) -> Any:
        if use_stateful_dataloader and not cls._stateful:
            if _stateful_lookup is None:  # only while accel_core.data_loader is half imported
                raise RuntimeError(
                    "use_stateful_dataloader=True: import accel_core.data_loader before "
                    f"building a {cls.__name__}."
                )
            cls = _stateful_lookup(cls)
        return super().__new__(cls)

    @property
    def use_stateful_dataloader(self) -> bool:
        """Whether this loader is a torchdata ``StatefulDataLoader`` (position saved mid-epoch)."""
        return self._stateful

    #: The loader that reads the data: this loader itself. Accelerate's prepared loaders wrap an
    #: inner ``DataLoader`` under this name; accel's are ``DataLoader`` subclasses, so code that
    #: reaches for ``base_dataloader`` gets the loader. Read on the class it is absent, as
    #: Accelerate's instance attribute is.
    base_dataloader: DataLoader = _ThisLoader()  # type: ignore[assignment]

    def reset(self) -> None:
        """Forget the previous iteration's end flag and remainder."""
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        """Start an iteration: compute the remainder when it is known and register the loader."""
        self.reset()
        if not self._drop_last:
            try:
                self.remainder = self._samples_per_epoch() % self.total_batch_size
            except (TypeError, AttributeError, NotImplementedError, ZeroDivisionError):
                self.remainder = -1  # an unsized dataset, or a sampler without a batch size
        self.gradient_state._add_dataloader(self)

    def end(self) -> None:
        """Finish an iteration: unregister the loader from ``GradientState``."""
        self.gradient_state._remove_dataloader(self)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled without the process-wide GradientState (the unpickled loader joins the one of
        # the process that loads it) and without a live iterator (worker processes, pipes).
        state = {k: v for k, v in self.__dict__.items() if k != "gradient_state"}
        if "_iterator" in state:
            state["_iterator"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Straight into __dict__: DataLoader refuses to set some attributes after __init__.
        self.__dict__.update(state)
        self.__dict__["gradient_state"] = GradientState()

    @property
    def total_batch_size(self) -> int:
        """Samples per step, all processes together."""
        raise NotImplementedError

    def _samples_per_epoch(self) -> int:
        """Samples drawn per epoch, all processes together, before any padding."""
        raise NotImplementedError
