"""``ExperimentTracking``: the trackers of one ``Accelerator`` (``init_trackers``, ``log``...).

The Accelerator owns one and delegates its tracker methods to it (see
:class:`~accel_core.tracking.mixin.TrackingMixin`); the checkpointer asks it for the run states
to store (:meth:`ExperimentTracking.run_states`) and gives back those it loads
(:meth:`ExperimentTracking.resume`). Starting and closing live in
:mod:`accel_core.tracking.session`, names in :mod:`~accel_core.tracking.registry` and
``log(reduce=...)`` in :mod:`~accel_core.tracking.reduction`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

# ``log(reduce=...)`` and the stand-ins of ``get_tracker`` import their modules when first used.
from accel_core.tracking.base import GeneralTracker, JSONValue
from accel_core.tracking.exit_status import WATCHER
from accel_core.tracking.registry import LogWithEntry, filter_trackers, tracker_class
from accel_core.tracking.session import StatesByTracker, TrackingSession

if TYPE_CHECKING:
    from accel_core.configuration import ProjectConfiguration
    from accel_core.state import AcceleratorState
    from accel_core.tracking.inactive import InactiveTracker


class ExperimentTracking:
    """Experiment tracking for one ``Accelerator`` (Accelerate's ``init_trackers``/``log``/...).

    Args:
        log_with: the trackers asked for (unknown names and a missing logging directory fail
            here).
        project_configuration: where local trackers write (its ``logging_dir``).
        state: the process state (which process is the main one, the device for ``reduce``).

    Attributes:
        log_with: the trackers chosen by ``Accelerator(log_with=...)``, checked: names as
            ``LoggerType`` members (or plain strings for trackers that are not members, like
            ``"jsonl"``) and the given ``GeneralTracker`` instances.
        trackers: the trackers this process runs once ``init_trackers`` was called: all of them on
            the main process; elsewhere only those whose class says ``main_process_only = False``
            (usually none, so the list is empty).
    """

    def __init__(
        self,
        log_with: LogWithEntry | Sequence[LogWithEntry] | None,
        project_configuration: ProjectConfiguration,
        state: AcceleratorState,
    ) -> None:
        self.project_configuration = project_configuration
        self.state = state
        self.log_with: list[LogWithEntry] = filter_trackers(
            log_with, project_configuration.logging_dir
        )
        self.session = TrackingSession(self.log_with)
        self.trackers: list[GeneralTracker] = self.session.trackers
        self._stand_ins: dict[str, InactiveTracker] = {}
        self._warned_log_before_init = False

    # -- checkpoints and the end of training ---------------------------------------------------

    def run_states(self) -> StatesByTracker:
        """Tracker name -> what identifies its run (``{"mlflow": {"run_id": ...}}``), JSON-ready.

        Complete on the main process; elsewhere only trackers that run there and states loaded
        from a checkpoint.
        """
        return self.session.run_states()

    def resume(self, state: Mapping[str, Mapping[str, JSONValue]]) -> None:
        """Continue the runs ``state`` names: now for trackers already started, at
        ``init_trackers`` for the others."""
        self.session.resume(state)

    def finish(self) -> None:
        """Close every tracker still open (once; later calls do nothing)."""
        self.session.close(None)

    # -- the Accelerator's tracker methods -----------------------------------------------------

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, object] | None = None,
        init_kwargs: dict[str, dict[str, object]] | None = None,
    ) -> None:
        """Start the trackers' runs: see :meth:`accel_core.Accelerator.init_trackers`."""
        kwargs = dict(init_kwargs or {})
        names = {_name(entry) for entry in self.log_with}
        unused = sorted(set(kwargs) - names)
        if unused:
            warnings.warn(
                f"init_kwargs has keys for trackers that log_with does not name: {unused}; "
                f"log_with names {sorted(names)}",
                stacklevel=3,
            )
        self.session.start(
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
        """Log ``values``: see :meth:`accel_core.Accelerator.log`."""
        if reduce is not None:
            from accel_core.tracking.reduction import check_reduction, reduce_values

            check_reduction(reduce)
            values = reduce_values(values, reduce, self.state.device)
        WATCHER.clear_error()
        if not self.session.started:
            if self.log_with and not self._warned_log_before_init and self.state.is_main_process:
                self._warned_log_before_init = True
                warnings.warn(
                    "accelerator.log() was called before init_trackers(): nothing is logged",
                    stacklevel=3,
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
        """The tracker called ``name``: see :meth:`accel_core.Accelerator.get_tracker`."""
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        names = [_name(entry) for entry in self.log_with]
        if name not in names:
            raise ValueError(
                f"get_tracker({name!r}): this Accelerator has no such tracker; log_with holds "
                f"{names}"
            )
        if self.state.is_main_process and not self.session.started:
            raise RuntimeError(
                f"get_tracker({name!r}) before init_trackers(): call "
                "accelerator.init_trackers(project_name) first"
            )
        stand_in = self._stand_ins.get(name)
        if stand_in is None:
            from accel_core.tracking.inactive import inactive_tracker

            entry = self.log_with[names.index(name)]
            cls = type(entry) if isinstance(entry, GeneralTracker) else tracker_class(name)
            stand_in = self._stand_ins[name] = inactive_tracker(cls)
        return stand_in


def _name(entry: LogWithEntry) -> str:
    if isinstance(entry, GeneralTracker):
        return entry.name
    return str(entry)
