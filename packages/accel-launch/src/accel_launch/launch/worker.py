"""Worker bootstrap: run the user's script or module, keeping what a failure summary needs.

torch's elastic agent starts ``python -u -m accel_launch.launch.worker (SCRIPT | -m MODULE) ARGS``
in each worker. This module (standard library only, so it costs nothing measurable):

1. on Linux, asks the kernel to kill this worker (SIGKILL) when its parent, the launcher running
   torch's agent, dies, even by SIGKILL: workers never outlive their launcher. A launcher that
   died before this line ran (``ACCEL_LAUNCHER_PID`` is no longer the parent) ends it at once;
2. copies everything the script writes to ``sys.stdout``/``sys.stderr`` into ``output.log`` next
   to the worker's ``TORCHELASTIC_ERROR_FILE`` (the console output is unchanged);
3. runs the script as ``__main__`` (``sys.argv`` and ``sys.path[0]`` as Python would set them);
4. on an uncaught exception, writes the error file in torch's format (what ``@record`` writes)
   and prints the traceback without this module's frames; the exit code is 1, as in Python;
5. ends the process through :func:`accel_launch.launch.finish.finish` (threads, ``atexit``
   handlers and file buffers as at a normal exit, then ``os._exit``), because interpreter
   finalization can abort a process that used torch.distributed (see that module).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from accel_launch.atomic_write import write_atomically
from accel_launch.launch import finish
from accel_launch.launch.finish import run_and_finish

OUTPUT_LOG = "output.log"
LAUNCHER_PID = "ACCEL_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class _Tee:
    """A text stream that writes to the console stream and to a log file."""

    def __init__(self, stream: IO[str], log: IO[str]) -> None:
        self._stream = stream
        self._log = log

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        try:
            self._log.write(text)
            self._log.flush()
        except (OSError, ValueError):
            pass
        return written

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _write_error_file(path: str, error: BaseException) -> None:
    data = {
        "message": {
            "message": f"{type(error).__name__}: {error}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(error)),
                "timestamp": str(int(time.time())),
            },
        }
    }

    # Written whole, then renamed into place: the agent reads the file as soon as it sees the
    # worker fail, and may stop the worker mid-write; an empty file crashes the agent's parser.
    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(data, file)

    try:
        write_atomically(Path(path), write)
    except OSError:
        pass


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop this bootstrap's, :mod:`finish`'s and runpy's frames from the front of a traceback."""
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (__file__, finish.__file__, "<frozen runpy>")
        or tb.tb_frame.f_code.co_filename.endswith("runpy.py")
    ):
        tb = tb.tb_next
    return tb


def stop_with_launcher() -> None:
    """Linux: be killed when the launcher dies; exit now if it is already gone."""
    launcher = os.environ.get(LAUNCHER_PID, "")
    if not sys.platform.startswith("linux") or not launcher.isdigit():
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != int(launcher):
        os._exit(128 + int(signal.SIGKILL))


def main(argv: list[str]) -> None:
    """Run ``argv`` (``[SCRIPT, ARGS...]`` or ``["-m", MODULE, ARGS...]``) as ``__main__``."""
    if not argv:
        raise SystemExit("usage: python -m accel_launch.launch.worker (SCRIPT | -m MODULE) [ARGS]")
    stop_with_launcher()
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if error_file:
        folder = os.path.dirname(error_file)
        os.makedirs(folder, exist_ok=True)
        log = open(os.path.join(folder, OUTPUT_LOG), "w", encoding="utf-8")  # noqa: SIM115
        sys.stdout = _Tee(sys.stdout, log)  # type: ignore[assignment]
        sys.stderr = _Tee(sys.stderr, log)  # type: ignore[assignment]

    def run() -> None:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            sys.argv = [script, *argv[1:]]
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")

    def report(error: BaseException) -> None:
        error.__traceback__ = _user_frames(error.__traceback__)
        if error_file:
            _write_error_file(error_file, error)
        sys.excepthook(type(error), error, error.__traceback__)

    run_and_finish(run, report)


if __name__ == "__main__":
    main(sys.argv[1:])
