"""``log_with="comet_ml"``: a Comet experiment (``comet_ml.start(project_name=...)``).

Online by default (an API key from ``comet login`` or ``COMET_API_KEY``). Offline with
``init_kwargs={"comet_ml": {"online": False, "experiment_config": {"offline_directory": ...}}}``:
the experiment is written as a zip archive (``experiment.json`` and ``messages.json``) in the
offline directory, uploaded later with ``comet upload``. ``experiment_config`` may be a
``comet_ml.ExperimentConfig`` or a dict of its fields.

The config goes through ``log_parameters`` (Comet flattens nested dicts itself); numbers become
metrics at ``step``, strings "others", dicts of numbers ``log_metrics``. A run that ends by an
uncaught exception is marked crashed by Comet's own exception hook (installed when ``comet_ml`` is
imported; offline, ``experiment.json`` records ``customer_error_reported``). Resuming continues the
saved ``experiment_key`` (``mode="get"``; offline, the upload appends to that experiment).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from accel_core.tracking.base import JSONValue, TrackerState, on_main_process
from accel_core.tracking.config_values import number
from accel_core.tracking.run_tracker import RunTracker

if TYPE_CHECKING:
    from comet_ml import CometExperiment


class CometMLTracker(RunTracker["CometExperiment"]):
    """A Comet experiment.

    Args:
        run_name: the project name.
        **kwargs: passed to ``comet_ml.start`` (``online``, ``workspace``, ``experiment_key``,
            ``mode``, ``experiment_config``...).
    """

    name = "comet_ml"
    _run_attribute = "writer"
    writer: CometExperiment | None

    def __init__(self, run_name: str, **kwargs: object) -> None:
        super().__init__(run_name, **kwargs)
        self._resume_key: str | None = None

    @on_main_process
    def start(self) -> None:
        """``comet_ml.start`` (the saved experiment with ``mode="get"`` when resuming)."""
        import comet_ml

        kwargs = dict(self.init_kwargs)
        config = kwargs.get("experiment_config")
        if isinstance(config, Mapping):
            kwargs["experiment_config"] = comet_ml.ExperimentConfig(**config)
        if self._resume_key is not None:
            kwargs["experiment_key"] = self._resume_key
            kwargs["mode"] = "get"
        kwargs.setdefault("project_name", self.run_name)
        self.writer = comet_ml.start(**kwargs)  # type: ignore[arg-type]

    def _store_config(self, run: CometExperiment, config: dict[str, JSONValue]) -> None:
        """``experiment.log_parameters(config)`` (Comet flattens nested dicts itself)."""
        run.log_parameters(config)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """Numbers as metrics, strings as others, dicts through ``log_metrics``."""
        writer = self._started()
        if step is not None:
            writer.set_step(step)
        for key, value in values.items():
            as_number = number(value)
            if as_number is not None:
                writer.log_metric(key, as_number, step=step, **kwargs)  # type: ignore[arg-type]
            elif isinstance(value, str):
                writer.log_other(key, value, **kwargs)  # type: ignore[arg-type]
            elif isinstance(value, Mapping):
                writer.log_metrics(dict(value), prefix=key, step=step, **kwargs)  # type: ignore[arg-type]

    def run_state(self) -> TrackerState:
        """``{"experiment_key"}``."""
        if self.writer is None:
            return {}
        return {"experiment_key": self.writer.get_key()}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Continue the saved experiment; the current one is ended (Comet keeps it)."""
        key = state.get("experiment_key")
        if not isinstance(key, str):
            return
        self._resume_key = key
        if self.writer is None or self.writer.get_key() == key:
            return
        self.writer.end()
        self.writer = None
        self.start()

    def _close(self, run: CometExperiment) -> None:
        """``experiment.end()`` (offline: writes the archive)."""
        run.end()
