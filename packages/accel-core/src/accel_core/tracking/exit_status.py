"""Close tracker runs at process exit, marked failed when an uncaught exception ended it.

Mechanism. The first ``init_trackers`` of a process wraps ``sys.excepthook`` (the wrapper records
the exception, then calls the hook it replaced) and every ``init_trackers`` (re-)registers one
``atexit`` handler, so that it runs before the handlers the backends registered while starting
(``atexit`` runs the last registered first): mlflow's and wandb's own exit handlers would
otherwise close the runs as successful. At exit the handler ends every run still open: with
``fail(error)`` after an uncaught exception (``finish()`` for trackers without that ability), else
with ``finish()``.

Where it works. A plain ``python script.py``: the interpreter calls ``sys.excepthook`` for an
uncaught exception, then the ``atexit`` handlers. Under ``accel launch`` (and accel-testing's
workers) the script runs through ``accel_launch.launch.finish.run_and_finish``, which also calls
``sys.excepthook`` for the exception and then runs the ``atexit`` handlers itself before
``os._exit``. ``sys.exit(code)`` is not an exception here (runs close as finished), and a process
killed by a signal runs no handler at all (the backend decides: wandb and mlflow leave the run
"running"/"crashed"). At an interactive prompt an uncaught exception does not end the process,
so it is not recorded; any ``log`` call after an exception clears it too.
"""

from __future__ import annotations

import atexit
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


class Closable(Protocol):
    """What the watcher closes at exit (a tracking session)."""

    def close(self, error: BaseException | None) -> None:
        """End every run still open; ``error``: the uncaught exception, if any."""
        ...


class ExitWatcher:
    """The process-wide record of the uncaught exception and the sessions to close."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self._sessions: list[Closable] = []
        self._previous_hook: ExceptHook | None = None

    def watch(self, session: Closable) -> None:
        """Close ``session`` at exit; install the hooks (the exit handler moves to run first)."""
        if session not in self._sessions:
            self._sessions.append(session)
        if self._previous_hook is None:
            self._previous_hook = sys.excepthook
            sys.excepthook = self._excepthook
        atexit.unregister(self._at_exit)
        atexit.register(self._at_exit)

    def forget(self, session: Closable) -> None:
        """Stop watching ``session`` (it was closed by ``end_training``)."""
        if session in self._sessions:
            self._sessions.remove(session)

    def clear_error(self) -> None:
        """Forget a recorded exception: the program went on after it."""
        self.error = None

    def _excepthook(
        self,
        kind: type[BaseException],
        error: BaseException,
        trace: TracebackType | None,
    ) -> object:
        if not hasattr(sys, "ps1"):  # at an interactive prompt the process goes on
            self.error = error
        previous = self._previous_hook or sys.__excepthook__
        return previous(kind, error, trace)

    def _at_exit(self) -> None:
        error = self.error
        for session in list(self._sessions):
            try:
                session.close(error)
            except Exception:  # one tracker's failure must not keep the others open
                traceback.print_exc()
        self._sessions.clear()


WATCHER = ExitWatcher()
