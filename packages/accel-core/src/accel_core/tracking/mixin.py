"""The tracker methods of ``Accelerator``: ``init_trackers``, ``log``, ``get_tracker``.

The ``Accelerator`` calls four internal methods: ``_setup_tracking(log_with)`` from ``__init__``
(after the project configuration is set), ``_finish_tracking()`` from ``end_training``,
``_tracking_state()`` from ``save_state`` (a JSON-serialisable dict stored in the checkpoint) and
``_resume_tracking(state)`` from ``load_state``. Everything else lives in
:mod:`accel_core.tracking.session` (starting and closing), :mod:`~accel_core.tracking.registry`
(names) and :mod:`~accel_core.tracking.reduction` (``log(reduce=...)``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from accel_core.tracking.base import GeneralTracker, JSONValue
from accel_core.tracking.exit_status import WATCHER
from accel_core.tracking.inactive import InactiveTracker, inactive_tracker
from accel_core.tracking.reduction import check_reduction, reduce_values
from accel_core.tracking.registry import LogWithEntry, filter_trackers, tracker_class
from accel_core.tracking.session import StatesByTracker, TrackingSession

if TYPE_CHECKING:
    from accel_core.configuration import ProjectConfiguration
    from accel_core.state import AcceleratorState


class TrackingMixin:
    """Experiment tracking for ``Accelerator`` (Accelerate's ``init_trackers``/``log``/...).

    Attributes:
        log_with: the trackers chosen by ``Accelerator(log_with=...)``, checked: names as
            ``LoggerType`` members (or plain strings for trackers that are not members, like
            ``"jsonl"``) and the given ``GeneralTracker`` instances.
        trackers: the trackers this process runs once ``init_trackers`` was called: all of them on
            the main process; elsewhere only those whose class says ``main_process_only = False``
            (usually none, so the list is empty).
    """

    state: AcceleratorState
    project_configuration: ProjectConfiguration
    log_with: list[LogWithEntry]
    trackers: list[GeneralTracker]
    _tracking: TrackingSession

    # -- wiring (called by Accelerator) --------------------------------------------------------

    def _setup_tracking(self, log_with: LogWithEntry | Sequence[LogWithEntry] | None) -> None:
        """Check ``log_with`` (unknown names and a missing logging directory fail here)."""
        self.log_with = filter_trackers(log_with, self.project_configuration.logging_dir)
        self._tracking = TrackingSession(self.log_with)
        self.trackers = self._tracking.trackers
        self._stand_ins: dict[str, InactiveTracker] = {}
        self._warned_log_before_init = False

    def _tracking_state(self) -> StatesByTracker:
        """Tracker name -> what identifies its run (``{"mlflow": {"run_id": ...}}``), JSON-ready.

        Complete on the main process; elsewhere only trackers that run there and states loaded
        from a checkpoint.
        """
        return self._tracking.run_states()

    def _resume_tracking(self, state: Mapping[str, Mapping[str, JSONValue]]) -> None:
        """Continue the runs ``state`` names: now for trackers already started, at
        ``init_trackers`` for the others."""
        self._tracking.resume(state)

    def _finish_tracking(self) -> None:
        """Close every tracker still open (once; later calls do nothing)."""
        self._tracking.close(None)

    # -- public API ----------------------------------------------------------------------------

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
        kwargs = dict(init_kwargs or {})
        names = {_name(entry) for entry in self.log_with}
        unused = sorted(set(kwargs) - names)
        if unused:
            warnings.warn(
                f"init_kwargs has keys for trackers that log_with does not name: {unused}; "
                f"log_with names {sorted(names)}",
                stacklevel=2,
            )
        self._tracking.start(
            project_name,
            self.project_configuration.logging_dir,
            kwargs,
            config,
            is_main_process=self.state.is_main_process,
        )

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
        if reduce is not None:
            check_reduction(reduce)
            values = reduce_values(values, reduce, self.state.device)
        WATCHER.clear_error()
        if not self._tracking.started:
            if self.log_with and not self._warned_log_before_init and self.state.is_main_process:
                self._warned_log_before_init = True
                warnings.warn(
                    "accelerator.log() was called before init_trackers(): nothing is logged",
                    stacklevel=2,
                )
            return
        extra = log_kwargs or {}
        for tracker in self.trackers:
            tracker.log(values, step=step, **extra.get(tracker.name, {}))

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
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        names = [_name(entry) for entry in self.log_with]
        if name not in names:
            raise ValueError(
                f"get_tracker({name!r}): this Accelerator has no such tracker; log_with holds "
                f"{names}"
            )
        if self.state.is_main_process and not self._tracking.started:
            raise RuntimeError(
                f"get_tracker({name!r}) before init_trackers(): call "
                "accelerator.init_trackers(project_name) first"
            )
        stand_in = self._stand_ins.get(name)
        if stand_in is None:
            entry = self.log_with[names.index(name)]
            cls = type(entry) if isinstance(entry, GeneralTracker) else tracker_class(name)
            stand_in = self._stand_ins[name] = inactive_tracker(cls)
        return stand_in


def _name(entry: LogWithEntry) -> str:
    if isinstance(entry, GeneralTracker):
        return entry.name
    return str(entry)
