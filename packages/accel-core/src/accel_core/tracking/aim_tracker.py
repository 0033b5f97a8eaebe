"""``log_with="aim"``: an Aim run in the repository at the logging directory.

Writes the Aim repository ``<logging_dir>/.aim`` (Accelerate's layout; ``aim up --repo
<logging_dir>`` shows it). The config is stored as the run's ``hparams`` (JSON-safe, nesting
kept); numbers are tracked as metrics, strings as ``aim.Text``. A run that ends normally reports
its successful finish; after an uncaught exception the error is written to the run's log and no
successful finish is reported, which is how Aim tells a failed run. Resuming reopens the saved
``run_hash``; a current run with nothing tracked is deleted from the repository.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from accel_core.tracking.base import (
    GeneralTracker,
    JSONValue,
    TrackerState,
    on_main_process,
    require_started,
)
from accel_core.tracking.config_values import number, to_json

if TYPE_CHECKING:
    from aim import Run


class AimTracker(GeneralTracker):
    """An Aim run.

    Args:
        run_name: the project name (the run's name).
        logging_dir: the Aim repository folder.
        **kwargs: passed to ``aim.Run`` (``experiment``, ``system_tracking_interval``...).
    """

    name = "aim"
    requires_logging_directory = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str] | None = ".", **kwargs: object
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self.aim_repo_path = os.fspath(logging_dir) if logging_dir is not None else "."
        self.init_kwargs = dict(kwargs)
        self.writer: Run | None = None
        self._logged = False
        self._ended = False
        self._resume_hash: str | None = None

    @property
    def tracker(self) -> Run | None:
        """The ``aim.Run``."""
        return self.writer

    @on_main_process
    def start(self) -> None:
        """Open a new run (or the saved one when resuming) in the repository."""
        from aim import Run

        kwargs = dict(self.init_kwargs)
        if self._resume_hash is not None:
            kwargs["run_hash"] = self._resume_hash
        self.writer = Run(repo=self.aim_repo_path, **kwargs)  # type: ignore[arg-type]
        if self._resume_hash is None:
            self.writer.name = self.run_name
        self._logged = False
        self._ended = False

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """``run["hparams"] = values`` (JSON-safe)."""
        self._writer()["hparams"] = to_json(values)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``run.track`` each value: numbers as metrics, strings as ``aim.Text``, Aim objects as
        they are, a dict's entries as ``key/sub``; ``kwargs`` go to ``track`` (``context``,
        ``epoch``)."""
        from aim import Text

        writer = self._writer()
        for key, value in values.items():
            pairs = value.items() if isinstance(value, Mapping) else [(None, value)]
            for sub, item in pairs:
                as_number = number(item)
                tracked = Text(item) if isinstance(item, str) else item
                name = key if sub is None else f"{key}/{sub}"
                writer.track(
                    as_number if as_number is not None else tracked,
                    name=name,
                    step=step,
                    **kwargs,  # type: ignore[arg-type]
                )
        self._logged = True

    @on_main_process
    def log_images(
        self,
        values: Mapping[str, object],
        step: int | None = None,
        kwargs: dict[str, dict[str, object]] | None = None,
    ) -> None:
        """Each value (an array or PIL image, or ``(image, caption)``) as an ``aim.Image``;
        ``kwargs={"aim_image": {...}, "track": {...}}`` go to ``aim.Image`` and ``track``."""
        import aim

        image_kwargs = (kwargs or {}).get("aim_image", {})
        track_kwargs = (kwargs or {}).get("track", {})
        writer = self._writer()
        for key, value in values.items():
            image, caption = value if isinstance(value, tuple) else (value, "")
            tracked = aim.Image(image, caption=caption, **image_kwargs)
            writer.track(tracked, name=key, step=step, **track_kwargs)  # type: ignore[arg-type]
        self._logged = True

    def run_state(self) -> TrackerState:
        """``{"run_hash", "repo"}``."""
        if self.writer is None:
            return {}
        return {"run_hash": self.writer.hash, "repo": self.aim_repo_path}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Continue the saved run; a current run with nothing tracked is deleted."""
        run_hash = state.get("run_hash")
        if not isinstance(run_hash, str):
            return
        self._resume_hash = run_hash
        writer = self.writer
        if writer is None or writer.hash == run_hash:
            return
        current = writer.hash
        writer.report_successful_finish()
        writer.close()
        self.writer = None
        if not self._logged:
            from aim import Repo

            Repo.from_path(self.aim_repo_path).delete_run(current)
        self.start()

    def _writer(self) -> Run:
        return require_started(self.writer, "aim")

    @on_main_process
    def finish(self) -> None:
        """Report the successful finish and close the run."""
        if self.writer is not None and not self._ended:
            self._ended = True
            self.writer.report_successful_finish()
            self.writer.close()

    @on_main_process
    def fail(self, error: BaseException) -> None:
        """Log the error to the run and close it without a successful finish."""
        if self.writer is not None and not self._ended:
            self._ended = True
            self.writer.log_error(f"run failed: {type(error).__name__}: {error}")
            self.writer.close()
