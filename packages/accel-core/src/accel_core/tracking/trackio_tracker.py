"""``log_with="trackio"``: a Trackio run (``trackio.init(project=project_name, ...)``).

Local first: runs go into one SQLite database per project in ``TRACKIO_DIR`` (default
``~/.cache/huggingface/trackio``; set the variable before ``trackio`` is imported), or to a
Hugging Face Space with ``init_kwargs={"trackio": {"space_id": ...}}``. The config is stored
JSON-safe with its nesting. A run that ends by an uncaught exception gets an error-level
``trackio`` alert ("run failed") before it is finished. Resuming continues the saved run name
(``resume="must"``); a current run with nothing logged is deleted from the local store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from accel_core.tracking.base import JSONValue, TrackerState, on_main_process
from accel_core.tracking.run_tracker import RunTracker

if TYPE_CHECKING:
    from trackio.run import Run


class TrackioTracker(RunTracker["Run"]):
    """A Trackio run.

    Args:
        run_name: the project name (``trackio.init(project=...)``).
        **kwargs: passed to ``trackio.init`` (``name``, ``space_id``, ``auto_log_cpu``...).
    """

    name = "trackio"
    run: Run | None

    def __init__(self, run_name: str, **kwargs: object) -> None:
        super().__init__(run_name, **kwargs)
        self._logged = False
        self._resume_name: str | None = None

    @on_main_process
    def start(self) -> None:
        """``trackio.init`` (the saved run with ``resume="must"`` when resuming)."""
        import trackio

        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project", self.run_name)
        if self._resume_name is not None:
            kwargs["name"] = self._resume_name
            kwargs["resume"] = "must"
            if "config" not in kwargs and self._is_local():
                # trackio sends a resumed run's config with its first log, replacing the stored
                # one: start from the stored config so that it is kept
                from trackio.sqlite_storage import SQLiteStorage

                stored = SQLiteStorage.get_run_config(str(kwargs["project"]), self._resume_name)
                kwargs["config"] = {
                    key: value for key, value in (stored or {}).items() if not key.startswith("_")
                }
        self.run = trackio.init(**kwargs)  # type: ignore[arg-type]
        self._logged = False

    def _store_config(self, run: Run, config: dict[str, JSONValue]) -> None:
        """Add ``config`` to the run's config."""
        run.config.update(config)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``run.log(values, step=step)``."""
        self._started().log(dict(values), step=step, **kwargs)  # type: ignore[arg-type]
        self._logged = True

    def run_state(self) -> TrackerState:
        """``{"run_name", "project"}``."""
        if self.run is None:
            return {}
        return {"run_name": self.run.name, "project": self.run.project}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Continue the saved run; a current run with nothing logged is deleted."""
        name = state.get("run_name")
        if not isinstance(name, str):
            return
        self._resume_name = name
        run = self.run
        if run is None or run.name == name:
            return
        run.finish()
        self.run = None
        if not self._logged and self._is_local():
            from trackio.sqlite_storage import SQLiteStorage

            SQLiteStorage.delete_run(run.project, run.name)
        self.start()

    def _is_local(self) -> bool:
        """Whether runs go to the local store (no Space, dataset or server given)."""
        remote = ("space_id", "server_url", "dataset_id", "bucket_id")
        return all(self.init_kwargs.get(key) is None for key in remote)

    @on_main_process
    def fail(self, error: BaseException) -> None:
        """An error alert "run failed" with the exception, then ``run.finish()``."""
        if self.run is None:
            return
        from trackio.alerts import AlertLevel

        self.run.alert(
            title="run failed", text=f"{type(error).__name__}: {error}", level=AlertLevel.ERROR
        )
        self.run.finish()
