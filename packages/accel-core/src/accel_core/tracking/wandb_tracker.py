"""``log_with="wandb"``: a Weights & Biases run (``wandb.init(project=project_name, ...)``).

Where it writes: W&B's own settings decide (``init_kwargs={"wandb": {"dir": ..., "mode":
"offline"}}``, or ``WANDB_DIR``/``WANDB_MODE``): online runs go to the server, offline runs to
``<dir>/wandb/offline-run-<time>-<id>/`` (upload later with ``wandb sync``). The config is stored
JSON-safe with its nesting (``run.config.update``). The run ends with exit code 0, or 1 after an
uncaught exception (255 for ``KeyboardInterrupt``, as wandb itself does).

Resuming calls ``wandb.init(id=<saved id>, resume="allow")``: online, the server continues the
same run; offline, a new run folder with the same id is written, which ``wandb sync`` adds to the
same run. Switching after ``init_trackers`` finishes the current run and, offline, removes its
folder when nothing was logged to it (after ``wandb.teardown()``, which waits for wandb's writer
process; the next run starts a new one); an online run stays on the server.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from accel_core.tracking.base import JSONValue, TrackerState, on_main_process
from accel_core.tracking.run_tracker import RunTracker

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run


class WandBTracker(RunTracker["Run"]):
    """A W&B run.

    Args:
        run_name: the project name (``wandb.init(project=...)``).
        **kwargs: passed to ``wandb.init`` (``mode``, ``dir``, ``entity``, ``name``, ``tags``...).
    """

    name = "wandb"
    run: Run | None

    def __init__(self, run_name: str, **kwargs: object) -> None:
        super().__init__(run_name, **kwargs)
        self._logged = False
        self._resume_id: str | None = None

    @on_main_process
    def start(self) -> None:
        """``wandb.init`` (with the saved id when resuming)."""
        import wandb

        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project", self.run_name)
        if self._resume_id is not None:
            kwargs["id"] = self._resume_id
            kwargs.setdefault("resume", "allow")
        self.run = wandb.init(**kwargs)  # type: ignore[arg-type]
        self._logged = False

    def _store_config(self, run: Run, config: dict[str, JSONValue]) -> None:
        """``run.config.update(config)``."""
        run.config.update(config, allow_val_change=True)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``run.log(values, step=step, **kwargs)``."""
        self._started().log(dict(values), step=step, **kwargs)  # type: ignore[arg-type]
        self._logged = True

    @on_main_process
    def log_images(
        self, values: Mapping[str, Sequence[object]], step: int | None = None, **kwargs: object
    ) -> None:
        """Each value, a list of arrays or PIL images, as a list of ``wandb.Image``."""
        import wandb

        for key, images in values.items():
            self.log({key: [wandb.Image(image) for image in images]}, step=step, **kwargs)

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[object]] | None = None,
        dataframe: object = None,
        step: int | None = None,
        **kwargs: object,
    ) -> None:
        """A ``wandb.Table`` from ``columns`` and ``data``, or from ``dataframe``."""
        import wandb

        table = wandb.Table(columns=columns, data=data, dataframe=dataframe)
        self.log({table_name: table}, step=step, **kwargs)

    def run_state(self) -> TrackerState:
        """``{"run_id", "project"}``."""
        if self.run is None:
            return {}
        return {"run_id": self.run.id, "project": self.run.project}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Continue the saved run (see the module docstring)."""
        run_id = state.get("run_id")
        if not isinstance(run_id, str):
            return
        self._resume_id = run_id
        run = self.run
        if run is None or run.id == run_id:
            return
        offline_folder = run.settings.sync_dir if run.offline and not self._logged else None
        run.finish()
        if offline_folder:
            import wandb

            wandb.teardown()  # waits for wandb's writer process: nothing writes there any more
            shutil.rmtree(offline_folder, ignore_errors=True)
        self.run = None
        self.start()

    @on_main_process
    def fail(self, error: BaseException) -> None:
        """``run.finish(exit_code=1)`` (255 for ``KeyboardInterrupt``)."""
        if self.run is not None:
            self.run.finish(exit_code=255 if isinstance(error, KeyboardInterrupt) else 1)
