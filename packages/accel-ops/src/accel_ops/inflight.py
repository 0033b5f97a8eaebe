"""What this process is waiting in: the collective in flight, for the launcher's hang report.

Recording. Every collective of accel-ops (and ``Accelerator.backward``, where DDP all-reduces the
gradients) runs inside :func:`begin` / :func:`end`. ``begin`` stores the operation name, a
reference to the input, the caller's frame and ``time.time()`` in one module-level slot; ``end``
puts the previous slot back (collectives nest: ``gather_for_metrics`` calls ``gather``). Nothing is
formatted then: the cost is a tuple and a clock read, well under a microsecond, against the
milliseconds of any real collective.

Reporting. When ``ACCEL_HANG_REPORT_DIR`` names a folder (``accel launch`` sets it),
:func:`start_reporter` starts a daemon thread that wakes every :data:`POLL_SECONDS`. A collective
that has lasted :data:`RECORD_AFTER_SECONDS` or more is written once to
``<folder>/rank-<rank>.json``: the operation, the shapes and dtypes of its input, the user's call
site (the first frame outside accel and torch), and since when. When it ends the file is
rewritten to say the rank runs outside any collective; a collective that raised is written at
once with its error; at interpreter exit the file says the rank exited. Each write goes to a
temporary file renamed into place, so a reader never sees half a record. The launcher reads the
files (``accel_launch.launch.hang_report``) and prints which rank waits in what, and which ranks
are in no collective: usually the culprit.

The record's keys: ``rank``, ``pid``, ``state`` (``waiting``, ``running``, ``failed`` or
``exited``), ``operation``, ``inputs``, ``call_site``, ``since`` (seconds since the epoch) and,
when failed, ``error``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import torch

POLL_SECONDS = 0.5
RECORD_AFTER_SECONDS = 1.0
_ERROR_CHARS = 500

# (operation, inputs, frame, since) of the collective in flight, or None.
_Slot = tuple[str, Any, FrameType | None, float]
_current: _Slot | None = None
_reporter: _Reporter | None = None

_OUR_FOLDERS = tuple(
    str(Path(module.__file__).resolve().parent) + os.sep
    for module in (sys.modules["accel_ops"], torch)
    if getattr(module, "__file__", None)
)


def begin(operation: str, inputs: Any = None) -> _Slot | None:
    """Record that this process enters ``operation``; returns the token to give to :func:`end`."""
    global _current
    previous = _current
    _current = (operation, inputs, sys._getframe(1), time.time())
    return previous


def end(previous: _Slot | None) -> None:
    """Record that the collective :func:`begin` returned ``previous`` for has finished."""
    global _current
    _current = previous


@contextmanager
def waiting_in(operation: str, inputs: Any = None) -> Iterator[None]:
    """:func:`begin` and :func:`end` around a block (for callers outside accel-ops)."""
    token = begin(operation, inputs)
    try:
        yield
    finally:
        end(token)


def failed(error: BaseException) -> None:
    """Write the collective in flight with ``error`` now (a reporter must be running)."""
    reporter = _reporter
    slot = _current
    if reporter is not None and slot is not None:
        reporter.write(_record(reporter.rank, "failed", slot, str(error)[:_ERROR_CHARS]))


def _describe_inputs(inputs: Any) -> str:
    if inputs is None:
        return ""
    if isinstance(inputs, str):
        return inputs
    from accel_ops._comm import describe

    try:
        return "; ".join(describe(inputs)) or "(no tensors)"
    except Exception as error:  # a record must never fail the reporter
        return f"(could not describe: {type(error).__name__})"


def _call_site(frame: FrameType | None) -> str:
    library_folders = _OUR_FOLDERS + _library_folders()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(library_folders) and not filename.startswith("<frozen"):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "(unknown)"


def _library_folders() -> tuple[str, ...]:
    """accel-core's folder when it is loaded: its frames are not the user's call site either."""
    core = sys.modules.get("accel_core")
    path = getattr(core, "__file__", None)
    return (str(Path(path).resolve().parent) + os.sep,) if path else ()


def _record(rank: int, state: str, slot: _Slot, error: str | None = None) -> dict[str, Any]:
    operation, inputs, frame, since = slot
    record: dict[str, Any] = {
        "rank": rank,
        "pid": os.getpid(),
        "state": state,
        "operation": operation,
        "inputs": _describe_inputs(inputs),
        "call_site": _call_site(frame),
        "since": since,
    }
    if error is not None:
        record["error"] = error
    return record


class _Reporter(threading.Thread):
    """The daemon thread that writes this rank's record when a collective lasts."""

    def __init__(self, folder: Path, rank: int) -> None:
        super().__init__(name="accel-hang-reporter", daemon=True)
        self.rank = rank
        self.path = folder / f"rank-{rank}.json"
        self._written: _Slot | None = None  # the slot the file shows as waiting, if any
        self._failed = False  # the file shows a failure: keep it until a new collective lasts
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        """Replace this rank's file with ``record`` (atomically; errors are ignored)."""
        record["rank"] = self.rank
        temporary = self.path.with_name(f".{self.path.name}.{threading.get_ident()}.tmp")
        with self._lock:
            if record["state"] == "exited" and self._failed:
                return  # the failure says more than "exited"
            self._failed = record["state"] == "failed"
            try:
                temporary.write_text(json.dumps(record), encoding="utf-8")
                os.replace(temporary, self.path)
            except OSError:
                pass

    def _idle(self, state: str) -> dict[str, Any]:
        return {"rank": self.rank, "pid": os.getpid(), "state": state, "since": time.time()}

    def run(self) -> None:
        self.write(self._idle("running"))
        while True:
            time.sleep(POLL_SECONDS)
            slot = _current
            if slot is self._written:
                continue
            if slot is not None and time.time() - slot[3] >= RECORD_AFTER_SECONDS:
                self.write(_record(self.rank, "waiting", slot))
                self._written = slot
            elif self._written is not None:
                self._written = None
                if not self._failed:
                    self.write(self._idle("running"))

    def exited(self) -> None:
        """Write that this rank has exited (a recorded failure is kept instead)."""
        self.write(self._idle("exited"))


def start_reporter(folder: str | None, rank: int) -> None:
    """Start writing this rank's record into ``folder`` (once per process; None: do nothing)."""
    global _reporter
    if not folder or _reporter is not None:
        return
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    _reporter = _Reporter(path, rank)
    _reporter.start()


def stop_reporter() -> None:
    """Write the final ``exited`` record (at interpreter exit; the thread is a daemon)."""
    global _reporter
    reporter = _reporter
    _reporter = None
    if reporter is not None:
        reporter.exited()
