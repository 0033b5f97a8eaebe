"""``log_with="mlflow"``: an MLflow run, through the tracking store of ``tracking_uri``.

Where it writes: ``tracking_uri`` (argument) > ``MLFLOW_TRACKING_URI`` > MLflow's default
(``sqlite:///mlflow.db`` in the working directory, since MLflow 3.7). No server is needed: a
``sqlite:///path/mlflow.db`` URI is a local file. As in Accelerate, ``MLFLOW_EXPERIMENT_NAME``,
``MLFLOW_RUN_ID``, ``MLFLOW_TAGS`` and ``MLFLOW_NESTED_RUN`` override the matching arguments.

The config becomes params (flattened to ``a.b`` keys, values as text; values over MLflow's length
limit are dropped with a warning; a param the run already has with another value, possible when
resuming, is kept and the new value dropped with a warning: MLflow params cannot change). Logged
numbers become metrics with their step (dicts of numbers as ``key/sub``); other values are
dropped with a warning. The run ends ``FINISHED``, ``FAILED`` after an uncaught exception, or
``KILLED`` after ``KeyboardInterrupt``. Resuming continues the saved ``run_id``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

from accel_core.tracking.base import (
    GeneralTracker,
    JSONValue,
    TrackerState,
    on_main_process,
    require_started,
)
from accel_core.tracking.config_values import flatten, number, to_scalar

if TYPE_CHECKING:
    from mlflow import ActiveRun


class MLflowTracker(GeneralTracker):
    """An MLflow run (see the module docstring for where it writes).

    Args:
        experiment_name: the project name; the experiment is created when missing.
        logging_dir: artifact location of a newly created experiment (Accelerate's meaning).
        run_id: continue this run instead of creating one.
        tags: tags of the run (and of a new experiment); a dict or its JSON text.
        nested_run: start the run nested in the active one.
        run_name: the name of a new run.
        description: the run's description.
        tracking_uri: where runs are stored (``sqlite:///runs/mlflow.db``, ``http://...``).
    """

    name = "mlflow"
    requires_logging_directory = False

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, object] | str | None = None,
        nested_run: bool | None = False,
        run_name: str | None = None,
        description: str | None = None,
        tracking_uri: str | None = None,
    ) -> None:
        super().__init__()
        from accel_ops import str_to_bool

        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        raw_tags = os.environ.get("MLFLOW_TAGS", tags)
        self.tags = json.loads(raw_tags) if isinstance(raw_tags, str) else raw_tags
        nested = os.environ.get("MLFLOW_NESTED_RUN", nested_run)
        self.nested_run = str_to_bool(nested) == 1 if isinstance(nested, str) else bool(nested)
        self.logging_dir = os.fspath(logging_dir) if logging_dir is not None else None
        self.run_name = run_name
        self.description = description
        self.tracking_uri = tracking_uri
        self.active_run: ActiveRun | None = None
        self._logged = False
        self._ended = False
        self._warned: set[str] = set()

    @property
    def tracker(self) -> ActiveRun | None:
        """The active ``mlflow.ActiveRun``."""
        return self.active_run

    @on_main_process
    def start(self) -> None:
        """Create the experiment when missing and start (or continue) the run."""
        import mlflow

        if self.tracking_uri is not None:
            mlflow.set_tracking_uri(self.tracking_uri)
        self.tracking_uri = mlflow.get_tracking_uri()
        found = mlflow.search_experiments(filter_string=f"name = '{self.experiment_name}'")
        if found:
            experiment_id = found[0].experiment_id
        else:
            experiment_id = mlflow.create_experiment(
                name=str(self.experiment_name),
                artifact_location=self.logging_dir,
                tags=self.tags,
            )
        self.active_run = mlflow.start_run(
            run_id=self.run_id,
            experiment_id=experiment_id,
            run_name=self.run_name,
            nested=self.nested_run,
            tags=self.tags,
            description=self.description,
        )
        self.run_id = self.active_run.info.run_id
        self._logged = False
        self._ended = False

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """Record ``values`` as params (see the module docstring)."""
        import mlflow
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        run = self._run()
        existing = mlflow.MlflowClient().get_run(run.info.run_id).data.params
        params: dict[str, str] = {}
        for key, value in flatten(values).items():
            text = str(to_scalar(value))
            if len(text) > MAX_PARAM_VAL_LENGTH:
                warnings.warn(
                    f"mlflow: config value {key!r} is longer than MLflow's limit of "
                    f"{MAX_PARAM_VAL_LENGTH} characters; it is not logged",
                    stacklevel=5,
                )
            elif key in existing and existing[key] != text:
                warnings.warn(
                    f"mlflow: the run already has param {key!r}={existing[key]!r}; MLflow params "
                    f"cannot change, so {text!r} is not logged",
                    stacklevel=5,
                )
            elif key not in existing:
                params[key] = text
        items = list(params.items())
        for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            mlflow.log_params(dict(items[start : start + MAX_PARAMS_TAGS_PER_BATCH]))

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """Numbers as metrics at ``step``; ``kwargs`` go to ``mlflow.log_metrics``."""
        import mlflow

        self._run()
        metrics: dict[str, float] = {}
        for key, value in values.items():
            pairs = value.items() if isinstance(value, Mapping) else [(None, value)]
            for sub, item in pairs:
                name = key if sub is None else f"{key}/{sub}"
                as_number = number(item)
                if as_number is None:
                    self._warn_once(name, item)
                else:
                    metrics[name] = float(as_number)
        mlflow.log_metrics(metrics, step=step, **kwargs)  # type: ignore[arg-type]
        self._logged = True

    def _warn_once(self, key: str, value: object) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(
            f"mlflow: {key!r} is a {type(value).__name__}, not a number; MLflow metrics are "
            "numbers, so it is not logged",
            stacklevel=5,
        )

    @on_main_process
    def log_figure(self, figure: object, artifact_file: str, **save_kwargs: object) -> None:
        """``mlflow.log_figure``: a matplotlib or plotly figure as an artifact."""
        import mlflow

        self._run()
        mlflow.log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)  # type: ignore[arg-type]

    @on_main_process
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        """``mlflow.log_artifacts``: every file of ``local_dir``."""
        import mlflow

        self._run()
        mlflow.log_artifacts(local_dir=local_dir, artifact_path=artifact_path)

    @on_main_process
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """``mlflow.log_artifact``: one file."""
        import mlflow

        self._run()
        mlflow.log_artifact(local_path=local_path, artifact_path=artifact_path)

    def run_state(self) -> TrackerState:
        """``{"run_id", "tracking_uri"}``."""
        if self.run_id is None or self.active_run is None:
            return {}
        return {"run_id": self.run_id, "tracking_uri": self.tracking_uri}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Continue the saved run; a current run with no metrics is ended and deleted."""
        run_id = state.get("run_id")
        if not isinstance(run_id, str):
            return
        uri = state.get("tracking_uri")
        if self.tracking_uri is None and isinstance(uri, str):
            self.tracking_uri = uri
        if self.active_run is None:
            self.run_id = run_id
            return
        if run_id == self.run_id:
            return
        import mlflow

        current = self.active_run.info.run_id
        mlflow.end_run()
        if not self._logged:
            mlflow.MlflowClient().delete_run(current)
        self.active_run = None
        self.run_id = run_id
        self.start()

    def _run(self) -> ActiveRun:
        return require_started(self.active_run, "mlflow")

    @on_main_process
    def finish(self) -> None:
        """End the run as ``FINISHED``."""
        self._end("FINISHED")

    @on_main_process
    def fail(self, error: BaseException) -> None:
        """End the run as ``FAILED`` (``KILLED`` for ``KeyboardInterrupt``)."""
        self._end("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")

    def _end(self, status: str) -> None:
        if self.active_run is None or self._ended:
            return
        self._ended = True
        import mlflow

        active = mlflow.active_run()
        if active is not None and active.info.run_id == self.active_run.info.run_id:
            mlflow.end_run(status=status)
        else:
            mlflow.MlflowClient().set_terminated(self.active_run.info.run_id, status=status)
