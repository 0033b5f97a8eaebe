"""Run a launch from a program that keeps running afterwards (``launch_command``, ``accel test``).

``accel launch`` owns its process: one worker replaces it (``exec``), and after a multi-process
job it leaves with ``os._exit``. A caller such as ``trl sft`` (through Accelerate's
``launch_command``) continues after the job, so here the one worker is a child process that is
waited for, and what the elastic agent changes in the calling process (``os.environ``, the
handlers of SIGTERM, SIGINT, SIGHUP, SIGQUIT and SIGUSR1) is put back when the job is over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Signals whose handlers torch's elastic agent (and the hang report) replace and do not restore.
_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1")
    if hasattr(signal, name)
)


def run_child(command: list[str], env: dict[str, str]) -> int:
    """Run the one worker as a child with ``env`` added to this environment; its exit code.

    A child killed by a signal gives the negative signal number, as :mod:`subprocess` reports it.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(command, env={**os.environ, **env}, check=False).returncode


@contextmanager
def caller_state_kept() -> Iterator[None]:
    """Restore ``os.environ`` and the signal handlers above on exit (handlers: main thread only)."""
    environ = dict(os.environ)
    in_main_thread = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS} if in_main_thread else {}
    try:
        yield
    finally:
        for name in set(os.environ) - set(environ):
            del os.environ[name]
        os.environ.update(environ)
        for sig, handler in handlers.items():
            if handler is not None:  # None: set from C, cannot be put back from Python
                signal.signal(sig, handler)
