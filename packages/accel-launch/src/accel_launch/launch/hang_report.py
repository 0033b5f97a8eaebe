"""The hang report: which rank waits in which collective, and which ranks are in none.

Each worker's accel-ops writes ``<log folder>/inflight/rank-<rank>.json`` when one of its
collectives lasts a second or more (see ``accel_ops.inflight`` for the record; the folder reaches
the workers as ``ACCEL_HANG_REPORT_DIR``). This module only reads those files, with the standard
library: :class:`HangMonitor` checks them every second and prints :func:`format_hang_table` once
a collective has waited ``--hang-report-after`` seconds (again only when what the ranks wait in
changes), and on ``SIGUSR1``; the failure summary prints the same table of the last records.

A rank in no collective while the others wait is usually the culprit: it took another branch,
is stuck in its own code, or died. Ranks waiting in different collectives (or at different call
sites) point to code that does not call collectives in the same order on every rank.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

FOLDER_NAME = "inflight"
REPORT_DIR_VARIABLE = "ACCEL_HANG_REPORT_DIR"
DEFAULT_REPORT_AFTER = 300.0
CHECK_EVERY_SECONDS = 1.0

Record = dict[str, Any]


def read_records(folder: Path) -> dict[int, Record]:
    """Every rank's last record in ``folder`` (a file being replaced is skipped this time)."""
    records: dict[int, Record] = {}
    try:
        paths = list(folder.glob("rank-*.json"))
    except OSError:
        return records
    for path in paths:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            records[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return records


def _seconds(record: Record, now: float) -> str:
    return f"{max(0.0, now - float(record.get('since', now))):.0f} s"


def _row(rank: int, record: Record | None, now: float) -> list[str]:
    if record is None:
        return [str(rank), "not started or no record", "", "", ""]
    state = record.get("state")
    if state == "waiting":
        where = f"waiting in {record.get('operation')}"
        return [str(rank), where, _seconds(record, now), record.get("inputs", ""), _site(record)]
    if state == "failed":
        operation = record.get("operation")
        error = str(record.get("error", "")).split(". ")[0]
        if error.startswith(f"{operation} failed on rank") and ": " in error:
            error = error.split(": ", 1)[1]  # the rank and operation are in the row already
        where = f"failed in {operation}: {error}"
        return [str(rank), where, "", record.get("inputs", ""), _site(record)]
    if state == "exited":
        return [str(rank), "exited", "", "", ""]
    return [str(rank), "not in any collective", "", "", ""]


def _site(record: Record) -> str:
    return str(record.get("call_site", ""))


def format_hang_table(records: dict[int, Record], ranks: Iterable[int], now: float) -> str:
    """A table of ``ranks``: what each waits in, for how long, its inputs and call site."""
    ranks = list(ranks)
    rows = [["rank", "where", "for", "inputs", "call site"]]
    rows += [_row(rank, records.get(rank), now) for rank in ranks]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    idle = [r for r in ranks if (records.get(r) or {}).get("state") in (None, "running", "exited")]
    busy = {
        (records[r].get("operation"), _site(records[r]))
        for r in ranks
        if r in records and records[r].get("state") in ("waiting", "failed")
    }
    if busy and idle:
        names = ", ".join(str(r) for r in idle)
        lines.append(
            f"  rank{'s' if len(idle) > 1 else ''} {names} in no collective while others wait: "
            "usually the culprit (another branch, stuck in its own code, or it exited)."
        )
    if len(busy) > 1:
        lines.append(
            "  ranks wait in different collectives or call sites: every rank must call the same "
            "collectives in the same order."
        )
    return "\n".join(lines)


def longest_wait(records: dict[int, Record], now: float) -> float:
    """Seconds the oldest collective still in flight has waited (0 when none waits)."""
    waits = [
        now - float(record.get("since", now))
        for record in records.values()
        if record.get("state") == "waiting"
    ]
    return max(waits, default=0.0)


class HangMonitor(threading.Thread):
    """Print the hang table when a collective has waited ``report_after`` seconds, or on demand.

    A daemon thread of the launcher. It reads the records every :data:`CHECK_EVERY_SECONDS` and
    prints again only when what the ranks wait in has changed since the last table.
    """

    def __init__(
        self, folder: Path, ranks: range, report_after: float, stream: IO[str] | None = None
    ) -> None:
        super().__init__(name="accel-hang-monitor", daemon=True)
        self.folder = folder
        self.ranks = ranks
        self.report_after = report_after
        self.stream = stream if stream is not None else sys.stderr
        self._printed: frozenset[tuple[int, float]] = frozenset()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def report(self, reason: str) -> None:
        """Print the table now, headed by ``reason``."""
        now = time.time()
        records = read_records(self.folder)
        with self._lock:
            print(
                f"accel launch: {reason}. Where each rank is ({self.folder}):\n"
                + format_hang_table(records, self.ranks, now),
                file=self.stream,
                flush=True,
            )

    def run(self) -> None:
        while not self._stop.wait(CHECK_EVERY_SECONDS):
            now = time.time()
            records = read_records(self.folder)
            if longest_wait(records, now) < self.report_after:
                continue
            waiting = frozenset(
                (rank, float(record["since"]))
                for rank, record in records.items()
                if record.get("state") == "waiting"
            )
            if waiting != self._printed:
                self._printed = waiting
                self.report(
                    f"a collective has waited {longest_wait(records, now):.0f} s "
                    f"(--hang-report-after {self.report_after:g})"
                )

    def stop(self) -> None:
        """End the thread's loop (it is a daemon: the launcher does not wait for it)."""
        self._stop.set()


def last_records_table(folder: Path, ranks: range) -> str | None:
    """The table for the failure summary, or None when no rank was in a collective at the end."""
    records = read_records(folder)
    if not any(record.get("state") in ("waiting", "failed") for record in records.values()):
        return None
    return format_hang_table(records, ranks, time.time())


def report_folder(log_dir: str) -> Path:
    """Where the workers of a job whose logs go to ``log_dir`` write their records."""
    return Path(log_dir) / FOLDER_NAME


def export_folder(folder: Path) -> None:
    """Tell the workers (through the environment they inherit) where to write their records."""
    os.environ[REPORT_DIR_VARIABLE] = str(folder)
