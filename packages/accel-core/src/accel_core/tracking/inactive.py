"""What ``get_tracker`` returns on a process that does not run the tracker.

Trackers run on the main process only (unless their class says ``main_process_only = False``).
So that code written for the main process runs unchanged everywhere, the other processes get an
*inactive* tracker: an object of a class generated from the real tracker class, with the same
``name``, the same public methods (``log``, ``log_images``, ``log_table``, ... whatever the real
class has), each accepting any arguments and doing nothing, and a ``tracker`` property that
returns the inactive object itself. A method the real class does not have raises
``AttributeError`` there too, so a misspelt call fails on every rank alike.
"""

from __future__ import annotations

import functools
import inspect

from accel_core.tracking.base import GeneralTracker


def _do_nothing(self: InactiveTracker, *args: object, **kwargs: object) -> None:
    """Does nothing: this process does not run the tracker."""


class InactiveTracker(GeneralTracker):
    """Base of the generated inactive classes (``isinstance(t, InactiveTracker)`` tells them)."""

    name = "inactive"
    requires_logging_directory = False
    active = False

    def __init__(self) -> None:
        super().__init__(_blank=True)

    @property
    def tracker(self) -> InactiveTracker:
        """The inactive object itself: this process has no backend run."""
        return self

    def __repr__(self) -> str:
        return f"<inactive {self.name!r} tracker: this process does not run it>"


@functools.cache
def _inactive_class(tracker_class: type[GeneralTracker]) -> type[InactiveTracker]:
    namespace: dict[str, object] = {
        "name": getattr(tracker_class, "name", tracker_class.__name__),
        "requires_logging_directory": getattr(tracker_class, "requires_logging_directory", False),
        "main_process_only": getattr(tracker_class, "main_process_only", True),
        "__doc__": f"Inactive stand-in for {tracker_class.__qualname__} (see accel_core.tracking"
        ".inactive).",
    }
    for attribute in dir(tracker_class):
        if attribute.startswith("_") or attribute in namespace or attribute == "tracker":
            continue
        raw = inspect.getattr_static(tracker_class, attribute)
        if isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
            namespace[attribute] = _do_nothing
        elif isinstance(raw, property):
            namespace[attribute] = property(lambda self: None)
    return type(f"Inactive{tracker_class.__name__}", (InactiveTracker,), namespace)


def inactive_tracker(tracker_class: type[GeneralTracker]) -> InactiveTracker:
    """An object with the public methods of ``tracker_class``, each doing nothing."""
    return _inactive_class(tracker_class)()
