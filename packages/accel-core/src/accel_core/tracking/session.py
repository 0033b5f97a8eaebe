"""The trackers of one ``Accelerator`` on one process: starting, resuming and closing them.

A :class:`TrackingSession` owns the list ``accelerator.trackers`` (the trackers this process
runs), which of them are closed, the config given to ``init_trackers`` and the run states of a
checkpoint loaded before ``init_trackers``. It makes no collective call: every method is local to
the process, so ``init_trackers`` may be called on the main process alone.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Mapping

from accel_core.tracking.base import GeneralTracker, JSONValue, SupportsFailure, SupportsResume
from accel_core.tracking.exit_status import WATCHER
from accel_core.tracking.registry import (
    LogWithEntry,
    TrackerNotInstalledError,
    pip_line,
    tracker_class,
)

StatesByTracker = dict[str, dict[str, JSONValue]]


class TrackerStartError(RuntimeError):
    """A tracker could not be created or started by ``init_trackers``."""


class TrackingSession:
    """Trackers of one Accelerator on this process (see the module docstring)."""

    def __init__(self, log_with: list[LogWithEntry]) -> None:
        self.log_with = log_with
        self.trackers: list[GeneralTracker] = []
        self.started = False
        self.config: Mapping[str, object] | None = None
        self._closed: set[int] = set()
        self._pending: StatesByTracker = {}
        self._states: StatesByTracker = {}

    # -- init_trackers -------------------------------------------------------------------------

    def check_installed(self) -> list[type[GeneralTracker] | GeneralTracker]:
        """The class (or given instance) of every entry of ``log_with``; raises for a missing
        backend with its ``pip install`` line, on every process alike."""
        found: list[type[GeneralTracker] | GeneralTracker] = []
        for entry in self.log_with:
            found.append(entry if isinstance(entry, GeneralTracker) else tracker_class(str(entry)))
        return found

    def start(
        self,
        project_name: str,
        logging_dir: str | os.PathLike[str] | None,
        init_kwargs: Mapping[str, Mapping[str, object]],
        config: Mapping[str, object] | None,
        is_main_process: bool,
    ) -> None:
        """Create and start the trackers this process runs, then store ``config`` in them.

        A tracker that fails to start closes the ones already started before the error is raised,
        so no run stays open.
        """
        if self.started and len(self._closed) < len(self.trackers):
            raise RuntimeError(
                "init_trackers() was already called and its trackers are running; call "
                "accelerator.end_training() before starting new runs"
            )
        classes = self.check_installed()
        self.trackers.clear()
        self._closed.clear()
        self.started = True
        self.config = config
        try:
            for entry, found in zip(self.log_with, classes, strict=True):
                runs_here = getattr(found, "main_process_only", True) is False or is_main_process
                if not runs_here:
                    continue
                tracker = (
                    found
                    if isinstance(found, GeneralTracker)
                    else _create(found, project_name, logging_dir, init_kwargs.get(str(entry), {}))
                )
                pending = self._pending.pop(tracker.name, None)
                if pending is not None and isinstance(tracker, SupportsResume):
                    tracker.resume(pending)
                _start(tracker)
                self.trackers.append(tracker)
            if config is not None:
                for tracker in self.trackers:
                    tracker.store_init_configuration(config)
        except BaseException:
            try:
                self.close(None)
            except Exception:  # the start error is the one to report
                pass
            raise
        WATCHER.watch(self)

    # -- checkpoints ---------------------------------------------------------------------------

    def run_states(self) -> StatesByTracker:
        """Tracker name -> run state, for every resumable tracker this process runs (plus states
        loaded from a checkpoint that no running tracker took)."""
        states: StatesByTracker = dict(self._pending)
        states.update(self._states)
        for tracker in self.trackers:
            if isinstance(tracker, SupportsResume) and id(tracker) not in self._closed:
                state = tracker.run_state()
                if state:
                    states[tracker.name] = state
        return states

    def resume(self, states: Mapping[str, Mapping[str, JSONValue]]) -> None:
        """Continue the runs of ``states``: switch running trackers to them now, remember the rest
        for the next ``init_trackers``."""
        if not isinstance(states, Mapping):
            raise TypeError(f"tracker states must be a dict of dicts, got {type(states).__name__}")
        for name, state in states.items():
            running = [t for t in self.trackers if t.name == name and id(t) not in self._closed]
            resumable = [t for t in running if isinstance(t, SupportsResume)]
            if not running:
                self._pending[name] = dict(state)
                continue
            if not resumable:
                warnings.warn(
                    f"the checkpoint has a run of tracker {name!r}, which cannot resume runs; "
                    "it goes on logging to its current run",
                    stacklevel=3,
                )
                continue
            for tracker in resumable:
                tracker.resume(dict(state))
                if self.config is not None:
                    tracker.store_init_configuration(self.config)
            # the backend may have registered exit handlers again: keep ours first
            WATCHER.watch(self)

    # -- closing -------------------------------------------------------------------------------

    def close(self, error: BaseException | None) -> None:
        """Close every open tracker once: ``fail(error)`` after an uncaught exception where the
        tracker supports it, else ``finish()``. Every tracker is closed even when one raises; the
        first exception is raised afterwards."""
        first: BaseException | None = None
        for tracker in self.trackers:
            if id(tracker) in self._closed:
                continue
            self._closed.add(id(tracker))
            if isinstance(tracker, SupportsResume):
                state = tracker.run_state()
                if state:
                    self._states[tracker.name] = state
            try:
                if error is not None and isinstance(tracker, SupportsFailure):
                    tracker.fail(error)
                else:
                    tracker.finish()
            except Exception as problem:
                first = first or problem
        WATCHER.forget(self)
        if first is not None:
            raise first


def _create(
    cls: type[GeneralTracker],
    project_name: str,
    logging_dir: str | os.PathLike[str] | None,
    kwargs: Mapping[str, object],
) -> GeneralTracker:
    """``cls(project_name[, logging_dir], **kwargs)`` with an error naming what does not fit."""
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            f"init_kwargs[{cls.name!r}] must be a dict of keyword arguments for "
            f"{cls.__name__}, got {type(kwargs).__name__}"
        )
    args: tuple[object, ...] = (project_name,)
    if cls.requires_logging_directory:
        args = (project_name, os.fspath(logging_dir) if logging_dir is not None else None)
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as problem:
            raise TypeError(
                f"init_kwargs[{cls.name!r}]={dict(kwargs)!r} do not fit {cls.__name__}{signature}:"
                f" {problem}"
            ) from None
    return cls(*args, **kwargs)


def _start(tracker: GeneralTracker) -> None:
    """``tracker.start()``; a missing module becomes the ``pip install`` line."""
    try:
        tracker.start()
    except ModuleNotFoundError as problem:
        line = pip_line(tracker.name)
        hint = f" Install it with `{line}`." if line else ""
        raise TrackerNotInstalledError(
            f"the {tracker.name} tracker could not import {problem.name!r}.{hint}"
        ) from problem
    except Exception as problem:
        raise TrackerStartError(
            f"the {tracker.name} tracker could not start: {type(problem).__name__}: {problem}. "
            f"Check init_kwargs[{tracker.name!r}] and the backend's own settings."
        ) from problem
