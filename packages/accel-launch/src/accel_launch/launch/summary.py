"""The short failure summary printed before torch's long report: who failed, why, last output."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

from accel_launch.launch.worker import OUTPUT_LOG

TAIL_LINES = 10


_SIGNAL_MEANING = {
    "SIGABRT": "it aborted in native code (e.g. a C++ error in gloo or NCCL); see its output",
    "SIGKILL": "killed from outside, often by the out-of-memory killer (see `dmesg`)",
    "SIGSEGV": "a crash in native code (an extension, a driver, or a bad tensor pointer)",
    "SIGBUS": "a bad memory access, often a full /dev/shm or a truncated memory-mapped file",
    "SIGTERM": "stopped from outside (a scheduler, or a user's kill)",
}


def _exit_reason(exitcode: int, has_exception: bool) -> str:
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            return f"was killed by signal {-exitcode}"
        meaning = _SIGNAL_MEANING.get(name)
        return f"was killed by {name}" + (f": {meaning}" if meaning else "")
    if not has_exception:
        return (
            f"exited with code {exitcode} without a Python exception (sys.exit or os._exit in the "
            "script, or the interpreter failed to start)"
        )
    return f"exited with code {exitcode}"


def _exception(error_file: str) -> str | None:
    try:
        with open(error_file, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):
        return None
    message = data.get("message")
    if isinstance(message, dict):
        message = message.get("message")
    return str(message) if message else None


def _tail(error_file: str, lines: int = TAIL_LINES) -> list[str]:
    if not error_file:
        return []
    path = os.path.join(os.path.dirname(error_file), OUTPUT_LOG)
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read()
    except OSError:
        return []
    return text.rstrip("\n").splitlines()[-lines:]


def root_cause(failures: Mapping[int, Any]) -> int:
    """The rank that failed first: not one the agent stopped (SIGTERM); earliest; lowest."""

    def order(rank: int) -> tuple[bool, int, int]:
        failure = failures[rank]
        stopped = int(failure.exitcode) == -signal.SIGTERM
        return (stopped, int(getattr(failure, "timestamp", 0)), rank)

    return min(failures, key=order)


def format_failure_summary(
    failures: Mapping[int, Any], machine_rank: int, hang_table: str | None = None
) -> str:
    """The summary of torch's ``ChildFailedError.failures`` (global rank -> ProcessFailure).

    ``hang_table`` (what each rank was waiting in at the end, when any was in a collective) is
    appended under its own heading.
    """
    host = socket.gethostname()
    out = [f"accel launch: the job failed on machine {machine_rank} ({host}):"]

    first = root_cause(failures) if failures else None
    order = sorted(failures, key=lambda rank: (rank != first, rank))
    for rank in order:
        failure = failures[rank]
        if rank != first and int(failure.exitcode) == -signal.SIGTERM:
            out.append(f"  rank {rank} (local rank {failure.local_rank}) was stopped by the agent")
            continue
        error_file = getattr(failure, "error_file", "") or ""
        exception = _exception(error_file) if error_file else None
        reason = _exit_reason(int(failure.exitcode), exception is not None)
        out.append(f"  rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {reason}")
        if exception:
            out.append(f"    exception: {exception}")
        tail = _tail(error_file)
        if tail:
            out.append(f"    last {len(tail)} lines of its output:")
            out += [f"      | {line}" for line in tail]
    if hang_table:
        out.append("  where each rank was in its collectives at the end:")
        out.append("\n".join("  " + line for line in hang_table.splitlines()))
    out.append("")
    return "\n".join(out)


def print_failure_summary(
    failures: Mapping[int, Any], machine_rank: int, log_dir: str, hang_table: str | None = None
) -> None:
    """Print :func:`format_failure_summary` to stderr, with where the full logs are."""
    text = format_failure_summary(failures, machine_rank, hang_table)
    print(text + f"  full per-rank logs: {log_dir}\n", file=sys.stderr, flush=True)
