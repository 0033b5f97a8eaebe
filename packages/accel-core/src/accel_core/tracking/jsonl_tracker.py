"""``log_with="jsonl"``: a dependency-free tracker writing JSON lines.

Layout, under ``<logging_dir>/<project_name>/``:

- ``<run_id>.jsonl`` -- one JSON object per ``log`` call, written and flushed at once:
  ``{"step": 3, "time": 1733050000.12, "values": {"loss": 0.25}}`` (``time``: seconds since the
  epoch; ``step``: ``null`` when not given; values made JSON-safe; NaN is written as ``NaN``, which
  Python's ``json`` reads back);
- ``<run_id>.run.json`` -- the run: ``project``, ``run_id``, ``status`` (``"running"``,
  ``"finished"``, ``"failed"``), ``error`` (for a failed run), ``config`` (the config given to
  ``init_trackers``, JSON-safe, nesting kept), ``started``/``ended`` times and ``resumes`` (one
  ``{"time", "step"}`` per resume: records after that step from before it belong to the
  interrupted attempt).

``run_id`` defaults to ``<date>-<time>-<6 hex digits>``. Resuming appends to the same file.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from accel_core.tracking.base import (
    GeneralTracker,
    JSONValue,
    TrackerState,
    on_main_process,
    require_started,
)
from accel_core.tracking.config_values import to_json


class JSONLinesTracker(GeneralTracker):
    """Writes every ``log`` call as one JSON line (see the module docstring for the files).

    Args:
        run_name: the project name; the files go in ``<logging_dir>/<run_name>/``.
        logging_dir: the Accelerator's logging directory.
        run_id: the file name stem (default: date, time and a random suffix).
    """

    name = "jsonl"
    requires_logging_directory = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str], run_id: str | None = None
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = Path(logging_dir)
        self.run_id = run_id
        self.run_file: Path | None = None
        self._file: IO[str] | None = None
        self._meta: dict[str, JSONValue] = {}
        self._last_step: int | None = None
        self._logged = False
        self._resume_state: dict[str, JSONValue] | None = None

    @property
    def tracker(self) -> Path | None:
        """The path of the run's ``.jsonl`` file."""
        return self.run_file

    @property
    def meta_file(self) -> Path | None:
        """The path of the run's ``.run.json`` file."""
        if self.run_file is None:
            return None
        return self.run_file.with_name(self.run_file.name[: -len(".jsonl")] + ".run.json")

    @on_main_process
    def start(self) -> None:
        """Open the run file (the saved one when resuming) for appending."""
        state = self._resume_state
        if state is not None and isinstance(state.get("run_file"), str):
            self._open(Path(str(state["run_file"])), resumed_at=state.get("step"))
            return
        run_id = self.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        self._open(self.logging_dir / self.run_name / f"{run_id}.jsonl", resumed_at=None)

    def _open(self, path: Path, resumed_at: JSONValue) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.run_file = path
        self._file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._logged = False
        meta_file = self.meta_file
        previous: dict[str, JSONValue] = {}
        if meta_file is not None and meta_file.exists():
            previous = json.loads(meta_file.read_text(encoding="utf-8"))
        resumes = previous.get("resumes")
        resumes = list(resumes) if isinstance(resumes, list) else []
        if previous:
            resumes.append({"time": time.time(), "step": resumed_at})
        self._meta = {
            "project": self.run_name,
            "run_id": path.name[: -len(".jsonl")],
            "status": "running",
            "error": None,
            "config": previous.get("config", {}),
            "started": previous.get("started", time.time()),
            "ended": None,
            "resumes": resumes,
        }
        if isinstance(resumed_at, int):
            self._last_step = resumed_at
        self._write_meta()

    def _write_meta(self) -> None:
        meta_file = self.meta_file
        if meta_file is None:
            return
        temporary = meta_file.with_name(meta_file.name + ".tmp")
        temporary.write_text(json.dumps(self._meta, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temporary, meta_file)

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """Write ``values`` (JSON-safe, nesting kept) as ``config`` in the ``.run.json`` file."""
        self._meta["config"] = to_json(values)
        self._write_meta()

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """Append one line ``{"step", "time", "values"}``; takes no keyword arguments."""
        if kwargs:
            raise TypeError(f"the jsonl tracker's log takes no keyword arguments, got {kwargs}")
        handle = require_started(self._file, "jsonl")
        record = {"step": step, "time": time.time(), "values": to_json(values)}
        handle.write(json.dumps(record) + "\n")
        self._logged = True
        if step is not None:
            self._last_step = step

    def run_state(self) -> TrackerState:
        """``{"run_file": path, "step": the last step logged}``."""
        if self.run_file is None:
            return {}
        return {"run_file": str(self.run_file), "step": self._last_step}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Append to the saved run file; a current run with nothing logged is removed."""
        self._resume_state = dict(state)
        if self._file is None or not isinstance(state.get("run_file"), str):
            return
        if self.run_file is not None and Path(str(state["run_file"])) == self.run_file:
            return
        if not self._logged and self.run_file is not None:
            self._file.close()
            self._file = None
            meta_file = self.meta_file
            self.run_file.unlink(missing_ok=True)
            if meta_file is not None:
                meta_file.unlink(missing_ok=True)
        else:
            self._close("finished", None)
        self._open(Path(str(state["run_file"])), resumed_at=state.get("step"))

    def _close(self, status: str, error: str | None) -> None:
        if self._file is None:  # not started, or already closed
            return
        self._file.close()
        self._file = None
        self._meta.update(status=status, error=error, ended=time.time())
        self._write_meta()

    @on_main_process
    def finish(self) -> None:
        """Close the file; the run's status becomes ``"finished"``."""
        self._close("finished", None)

    @on_main_process
    def fail(self, error: BaseException) -> None:
        """Close the file; the run's status becomes ``"failed"``, with the error."""
        self._close("failed", f"{type(error).__name__}: {error}")
