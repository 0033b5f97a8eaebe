"""The tracker interface: :class:`GeneralTracker` and the two optional abilities.

Call order, as :class:`~accel_core.tracking.TrackingMixin` makes it, on each process that runs the
tracker (the main process; every process for a class with ``main_process_only = False``):

1. ``__init__(project_name[, logging_dir], **init_kwargs["<name>"])`` -- stores arguments only;
   never imports the backend (``accelerator.init_trackers``);
2. ``resume(state)`` -- only for a :class:`SupportsResume` tracker when a checkpoint was loaded
   before ``init_trackers``: remember the run to continue;
3. ``start()`` -- imports the backend and opens (or reopens) the run;
4. ``store_init_configuration(config)`` -- when ``init_trackers`` got a config;
5. any number of ``log(values, step, **log_kwargs["<name>"])`` and backend-specific calls
   (``log_images``, ``log_table``...); ``run_state()`` and ``resume(state)`` (a checkpoint is
   saved or loaded after ``init_trackers``: switch to the saved run) may come in between;
6. exactly once: ``finish()`` (``end_training`` or a normal exit), or ``fail(error)`` for a
   :class:`SupportsFailure` tracker when the process ends by an uncaught exception.

Trackers written against Hugging Face Accelerate's ``GeneralTracker`` (``name``,
``requires_logging_directory``, ``tracker``, ``start``, ``store_init_configuration``, ``log``,
``finish``) work unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import ClassVar, Protocol, TypeVar, Union, runtime_checkable

JSONValue = Union[str, int, float, bool, None, list["JSONValue"], dict[str, "JSONValue"]]
"""A value that ``json.dumps`` writes and ``json.loads`` reads back unchanged."""

TrackerState = dict[str, JSONValue]
"""What identifies one tracker's run in a checkpoint (``{"run_id": ...}``)."""

_Method = TypeVar("_Method", bound=Callable[..., object])
_Run = TypeVar("_Run")


def require_started(run: _Run | None, name: str) -> _Run:
    """``run`` (a tracker's backend object); an error naming the tracker when it isn't started."""
    if run is None:
        raise RuntimeError(f"the {name} tracker is not started: call init_trackers first")
    return run


def on_main_process(function: _Method) -> _Method:
    """Run the decorated tracker method on the main process only, if the tracker says so.

    The check happens at call time (so the process state is read when the method runs, not when
    the class is defined) and only for trackers whose ``main_process_only`` is true; elsewhere
    the call does nothing and returns ``None``.
    """

    @functools.wraps(function)
    def run_on_main(self: GeneralTracker, *args: object, **kwargs: object) -> object:
        if getattr(self, "main_process_only", True):
            from accel_ops import PartialState

            if not PartialState().is_main_process:
                return None
        return function(self, *args, **kwargs)

    return run_on_main  # type: ignore[return-value]


class GeneralTracker:
    """Base class of experiment trackers (the interface of Accelerate's ``GeneralTracker``).

    Subclasses define:

    - ``name`` (class attribute): the name used in ``log_with`` and ``init_kwargs``;
    - ``requires_logging_directory`` (class attribute): when true the tracker is built as
      ``cls(project_name, logging_dir, **kwargs)``, else as ``cls(project_name, **kwargs)``;
    - ``tracker`` (property): the backend's own run object (``get_tracker(name, unwrap=True)``);
    - ``main_process_only`` (class attribute, default ``True``): ``False`` runs the tracker on
      every process.

    and override what the backend supports of ``start``, ``store_init_configuration``, ``log``
    and ``finish``, each documented below. The methods of this class do nothing.
    """

    name: ClassVar[str]
    requires_logging_directory: ClassVar[bool]
    main_process_only: ClassVar[bool] = True

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [
            f"`{attribute}`"
            for attribute in ("name", "requires_logging_directory", "tracker")
            if not hasattr(type(self), attribute)
        ]
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} does not define {', '.join(missing)}: a tracker class "
                "needs `name` and `requires_logging_directory` class attributes and a `tracker` "
                "property (see accel_core.tracking.GeneralTracker)."
            )

    def start(self) -> None:
        """Open the run: import the backend here, not in ``__init__``."""

    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """Record ``values`` as the run's hyperparameters.

        Values may be anything a config holds (numbers, strings, ``None``, lists, nested dicts,
        paths, enums); a tracker converts what its backend cannot store instead of failing.
        """

    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """Record ``values`` (name -> number, string or dict of numbers) at ``step``.

        ``kwargs`` come from ``accelerator.log(..., log_kwargs={name: {...}})``.
        """

    def finish(self) -> None:
        """Close the run; called once."""


@runtime_checkable
class SupportsResume(Protocol):
    """A tracker whose run can be continued after a checkpoint is loaded.

    ``run_state()`` returns a JSON-serialisable dict that identifies the run (stored in the
    checkpoint by ``save_state``). ``resume(state)`` takes such a dict: before ``start()`` it
    makes ``start()`` reopen that run; after ``start()`` it closes the current run (removing it
    when nothing was logged to it and the backend allows) and reopens the saved one.
    """

    def run_state(self) -> TrackerState:
        """What identifies the current run; ``{}`` before ``start()``."""
        ...

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Continue the run that ``state`` (from :meth:`run_state`) identifies."""
        ...


@runtime_checkable
class SupportsFailure(Protocol):
    """A tracker that can close its run marked failed (called instead of ``finish``)."""

    def fail(self, error: BaseException) -> None:
        """Close the run, marked failed because of ``error``."""
        ...
