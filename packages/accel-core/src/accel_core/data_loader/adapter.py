"""``DataLoaderAdapter``: a torch ``DataLoader`` (or torchdata ``StatefulDataLoader``) held inside
an object that passes for it.

Hugging Face Accelerate builds its prepared loaders on this class. accel's prepared loaders
(:class:`~accel_core.data_loader.DataLoaderShard` and the others) subclass ``DataLoader`` directly,
so this class is here for code that builds on Accelerate's: it creates the inner loader
(``base_dataloader``), forwards every attribute it doesn't have to it, and reports the inner
loader's class as its ``__class__``, so ``isinstance(adapter, DataLoader)`` holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, cast

from torch.utils.data import DataLoader, Dataset, Sampler


class _StatefulLoader(Protocol):
    """torchdata's ``StatefulDataLoader``, as far as this module uses it."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def _rebuild(cls: type[DataLoaderAdapter], state: dict[str, Any]) -> DataLoaderAdapter:
    adapter = cls.__new__(cls)
    vars(adapter).update(state)
    return adapter


class DataLoaderAdapter:
    """Wrap a new ``DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)``.

    Args:
        dataset: the dataset to load.
        use_stateful_dataloader: build torchdata's ``StatefulDataLoader`` instead, whose
            position ``state_dict()`` / ``load_state_dict()`` save and restore.
        batch_sampler: the batch sampler of the inner loader.
        **kwargs: every other argument of the inner loader.

    Attributes:
        base_dataloader: the inner loader.
        dl_state_dict: the inner loader's last recorded ``state_dict()`` (stateful loaders).
    """

    def __init__(
        self,
        dataset: Dataset,
        use_stateful_dataloader: bool = False,
        batch_sampler: Sampler | None = None,
        **kwargs: Any,
    ) -> None:
        self.use_stateful_dataloader = use_stateful_dataloader
        if use_stateful_dataloader:
            try:
                from torchdata.stateful_dataloader import StatefulDataLoader
            except ImportError as error:
                raise ImportError(
                    "use_stateful_dataloader=True needs torchdata's StatefulDataLoader: "
                    'pip install "accel-core[stateful]" (or pip install torchdata).'
                ) from error
            self.base_dataloader: DataLoader = StatefulDataLoader(
                dataset, batch_sampler=batch_sampler, **kwargs
            )
        else:
            self.base_dataloader = DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict: dict[str, Any] = self.base_dataloader.state_dict()

    def __getattr__(self, name: str) -> Any:
        # Only called for names the adapter lacks; base_dataloader itself missing means the
        # object is not initialised (unpickling, __new__): don't recurse.
        if name == "base_dataloader":
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        """The inner loader's class, so that ``isinstance(adapter, DataLoader)`` holds."""
        return self.base_dataloader.__class__

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), dict(vars(self))))

    def __len__(self) -> int:
        return len(self.base_dataloader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base_dataloader)

    def state_dict(self) -> dict[str, Any]:
        """The recorded position of the inner (stateful) loader."""
        return self.dl_state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the inner (stateful) loader's position."""
        # Only a stateful inner loader has the method (a plain one raises AttributeError).
        cast(_StatefulLoader, self.base_dataloader).load_state_dict(state_dict)

    def adjust_state_dict_for_prefetch(self) -> None:
        """Correct ``dl_state_dict`` for batches read ahead but not yet yielded.

        A prepared loader reads one batch ahead, and with several processes the inner stateful
        loader has counted ``num_processes - 1`` batches too many: the counters
        ``_sampler_iter_yielded``, ``_num_yielded`` and the sampler's ``samples_yielded``
        (``batch_size`` per batch) are lowered by that much when positive. Override for another
        correction; it must change ``dl_state_dict`` in place.
        """
        from accel_ops import PartialState

        state = PartialState()
        if state.num_processes <= 1:
            return
        extra = state.num_processes - 1
        for key in ("_sampler_iter_yielded", "_num_yielded"):
            if self.dl_state_dict.get(key, 0) > 0:
                self.dl_state_dict[key] -= extra
        sampler_state = self.dl_state_dict.get("_index_sampler_state")
        if isinstance(sampler_state, dict) and sampler_state.get("samples_yielded", 0) > 0:
            loader = self.base_dataloader
            batch_size = loader.batch_size or getattr(loader.batch_sampler, "batch_size", 0)
            sampler_state["samples_yielded"] -= batch_size * extra

    def _update_state_dict(self) -> None:
        """Record the inner loader's position now, corrected for read-ahead, with
        ``_iterator_finished`` set from ``end_of_dataloader``."""
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()
            self.adjust_state_dict_for_prefetch()
            self.dl_state_dict["_iterator_finished"] = bool(
                getattr(self, "end_of_dataloader", False)
            )
