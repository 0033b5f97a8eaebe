"""``LOGGER_TYPE_TO_CLASS``: Accelerate's dict of tracker name -> class, as a live view.

It reads the registry (:mod:`accel_core.tracking.registry`) each time, so it lists the built-in
trackers, the ``accel.trackers`` entry points and the classes registered so far; setting an item
registers a class under that name. A built-in class is returned whether or not its backend is
installed (the class imports the backend only when it starts).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

from accel_core.tracking import registry
from accel_core.tracking.base import GeneralTracker


class TrackerClassTable(MutableMapping[str, type[GeneralTracker]]):
    """Tracker name -> tracker class, read from and written to the registry."""

    def __getitem__(self, name: str) -> type[GeneralTracker]:
        if not isinstance(name, str) or name.lower() not in registry.known_trackers():
            raise KeyError(name)
        return registry.tracker_class(name, installed_only=False)

    def __setitem__(self, name: str, tracker_class: type[GeneralTracker]) -> None:
        if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
            raise TypeError(
                f"LOGGER_TYPE_TO_CLASS[{name!r}] must be a GeneralTracker subclass, got "
                f"{tracker_class!r}"
            )
        registry.register_tracker_class(tracker_class, name=name)

    def __delitem__(self, name: str) -> None:
        if not registry.is_registered(name):
            raise KeyError(
                f"{name!r} is not a class registered in this process; built-in and entry-point "
                "trackers can't be removed"
            )
        registry.unregister_tracker_class(name)

    def __iter__(self) -> Iterator[str]:
        return iter(registry.known_trackers())

    def __len__(self) -> int:
        return len(registry.known_trackers())

    def __repr__(self) -> str:
        return f"LOGGER_TYPE_TO_CLASS({registry.known_trackers()})"


LOGGER_TYPE_TO_CLASS = TrackerClassTable()
