"""The tracker methods of ``Accelerator``: ``init_trackers``, ``log``, ``get_tracker``.

Each delegates to the Accelerator's :class:`~accel_core.tracking.experiment.ExperimentTracking`
(built in ``__init__`` from ``log_with`` and the project configuration), which owns the trackers;
the checkpointer stores its run states and gives them back on ``load_state``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    from accel_core.tracking.base import GeneralTracker, JSONValue
    from accel_core.tracking.experiment import ExperimentTracking
    from accel_core.tracking.registry import LogWithEntry
    from accel_core.tracking.session import StatesByTracker


class TrackingMixin:
    """Experiment tracking for ``Accelerator`` (Accelerate's ``init_trackers``/``log``/...),
    for a class whose ``_tracking`` is its :class:`ExperimentTracking`."""

    _tracking: ExperimentTracking

    @property
    def log_with(self) -> list[LogWithEntry]:
        """The trackers chosen by ``Accelerator(log_with=...)``, checked: names as ``LoggerType``
        members (or plain strings for trackers that are not members, like ``"jsonl"``) and the
        given ``GeneralTracker`` instances."""
        return self._tracking.log_with

    @property
    def trackers(self) -> list[GeneralTracker]:
        """The trackers this process runs once ``init_trackers`` was called: all of them on the
        main process; elsewhere only those whose class says ``main_process_only = False``
        (usually none, so the list is empty)."""
        return self._tracking.trackers

    def _tracking_state(self) -> StatesByTracker:
        """Tracker name -> what identifies its run, JSON-ready (what ``save_state`` stores)."""
        return self._tracking.run_states()

    def _resume_tracking(self, state: Mapping[str, Mapping[str, JSONValue]]) -> None:
        """Continue the runs ``state`` names (what ``load_state`` does with a checkpoint's)."""
        self._tracking.resume(state)

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, object] | None = None,
        init_kwargs: dict[str, dict[str, object]] | None = None,
    ) -> None:
        """Start a run in every tracker of ``log_with``, and store ``config`` in it.

        Args:
            project_name: the project (or experiment) name every tracker files the run under.
            config: hyperparameters to record; nested dicts, lists, ``None``, paths and enums are
                converted where a backend cannot store them.
            init_kwargs: per tracker name, keyword arguments for that tracker's class, e.g.
                ``{"wandb": {"mode": "offline"}, "mlflow": {"tracking_uri": "sqlite:///m.db"}}``.

        Errors come here, never in the middle of training: a backend that is not installed raises
        ``TrackerNotInstalledError`` with its ``pip install`` line (on every process), keyword
        arguments a tracker does not take raise ``TypeError``, a backend that refuses to start
        raises ``TrackerStartError`` (on the main process). It makes no collective call, so it may
        be called on the main process only. An uncaught exception that ends the process later
        closes the runs marked failed (see :mod:`accel_core.tracking.exit_status`).
        """
        self._tracking.init_trackers(project_name, config, init_kwargs)

    def log(
        self,
        values: dict[str, object],
        step: int | None = None,
        log_kwargs: dict[str, dict[str, object]] | None = None,
        reduce: str | None = None,
    ) -> None:
        """Log ``values`` to every tracker, at ``step``.

        Without ``reduce`` the main process writes its own values and the other processes do
        nothing. With ``reduce="mean"``, ``"sum"``, ``"max"`` or ``"min"`` each number is first
        reduced across processes: then **every process must call** ``log`` at the same point with
        the same numeric keys (a mismatch raises ``ValueError`` on every process); strings and
        other values are taken from the main process. ``log_kwargs`` maps a tracker name to
        keyword arguments for that tracker's ``log``.
        """
        self._tracking.log(values, step, log_kwargs, reduce)

    @overload
    def get_tracker(self, name: str, unwrap: Literal[False] = False) -> GeneralTracker: ...

    @overload
    def get_tracker(self, name: str, unwrap: bool) -> Any: ...

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name``; with ``unwrap``, the backend's run object instead (typed
        ``Any``: a ``wandb`` run, an ``mlflow`` run, a ``SummaryWriter``...).

        On a process that does not run the tracker (every process but the main one, for the
        built-in trackers) this is an inactive stand-in with the same methods doing nothing (the
        same object on every call), also with ``unwrap=True``:
        ``get_tracker("wandb").log_images(...)`` is safe everywhere, but code that uses a backend
        object's own API should run on the main process only. A name that ``log_with`` does not
        hold raises ``ValueError`` on every process.
        """
        return self._tracking.get_tracker(name, unwrap)
