"""The skeleton that the W&B, Comet, SwanLab, Trackio, DVCLive and ClearML trackers share.

Each wraps one backend run object that ``start`` opens. :class:`RunTracker` does the rest the
same way for all of them: it stores the project name and the ``init_kwargs`` (for ``start``),
returns the run object as ``tracker``, stores the config as one JSON-safe dict (nesting kept; a
value that is not a mapping goes under ``"config"``), and closes the run at ``finish``. A tracker
module adds only what is its library's:

- ``_run_attribute``: the attribute holding the run object (``run``; Accelerate's names
  ``writer``, ``task``, ``live`` where its tracker uses them);
- ``start``: import the library (only there, never at module import) and set that attribute;
- ``log`` and any backend-specific ``log_*`` methods;
- ``_store_config(run, config)``: hand the JSON-safe config to the library;
- ``_close(run)`` when closing is not ``run.finish()``.

``store_init_configuration`` and ``finish`` run on the main process only, like every method of
a built-in tracker; before ``start``, ``store_init_configuration`` (and a ``log`` that goes
through :meth:`RunTracker._started`) raises the ``"the <name> tracker is not started"`` error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar, cast

from accel_core.tracking.base import GeneralTracker, JSONValue, on_main_process, require_started
from accel_core.tracking.config_values import to_json

_Run = TypeVar("_Run")


class RunTracker(GeneralTracker, Generic[_Run]):
    """A tracker over one backend run object (see the module docstring for what to define).

    Args:
        run_name: the project name given to ``init_trackers``.
        **kwargs: ``init_kwargs["<name>"]``, kept as ``init_kwargs`` for ``start``.
    """

    _run_attribute: ClassVar[str] = "run"
    requires_logging_directory = False

    def __init__(self, run_name: str | None, **kwargs: object) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = dict(kwargs)
        setattr(self, self._run_attribute, None)

    @property
    def tracker(self) -> _Run | None:
        """The backend's run object (``None`` before ``start``)."""
        return cast("_Run | None", getattr(self, self._run_attribute))

    def _started(self) -> _Run:
        """The run object; an error naming the tracker when ``start`` has not run."""
        return require_started(self.tracker, self.name)

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """Store ``values``, made JSON-safe with their nesting kept, as the run's config."""
        run = self._started()
        config = to_json(values)
        self._store_config(run, config if isinstance(config, dict) else {"config": config})

    def _store_config(self, run: _Run, config: dict[str, JSONValue]) -> None:
        """Hand ``config`` to the backend (called by :meth:`store_init_configuration`)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _store_config")

    @on_main_process
    def finish(self) -> None:
        """Close the run, if it was started (:meth:`_close`)."""
        run = self.tracker
        if run is not None:
            self._close(run)

    def _close(self, run: _Run) -> None:
        """``run.finish()``; a backend that closes its run differently overrides this."""
        cast(Any, run).finish()
