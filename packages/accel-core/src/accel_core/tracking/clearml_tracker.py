"""``log_with="clearml"``: a ClearML task (``clearml.Task.init``).

The project and task names come from ``CLEARML_PROJECT`` / ``CLEARML_TASK`` when set, else from the
project name given to ``init_trackers``; ``init_kwargs={"clearml": {...}}`` go to ``Task.init``
(and win over both). A task the script already started (``Task.current_task()``) is used as it is
and left open at the end. Where it writes is ClearML's own configuration (a server, or offline
mode with ``Task.set_offline(True)``).

Numbers logged with a ``step`` are scalars: a key ``eval_loss``, ``test_...`` or ``train_...`` is
reported as title ``loss`` in the series ``eval``, ``test`` or ``train``, any other key in the
series ``train``. Without a step they are single values. Other values are dropped with one warning
per key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from accel_core.tracking.base import JSONValue, on_main_process
from accel_core.tracking.config_values import number
from accel_core.tracking.run_tracker import RunTracker

if TYPE_CHECKING:
    from clearml import Task

logger = logging.getLogger(__name__)

_SERIES = ("eval", "test", "train")


def title_and_series(name: str) -> tuple[str, str]:
    """``"eval_loss"`` -> ``("loss", "eval")``; a name without such a prefix is in ``train``."""
    for series in _SERIES:
        if name.startswith(series + "_"):
            return name[len(series) + 1 :], series
    return name, "train"


class ClearMLTracker(RunTracker["Task"]):
    """A ClearML task.

    Args:
        run_name: the project and task name (unless ``CLEARML_PROJECT`` / ``CLEARML_TASK`` say
            otherwise).
        **kwargs: passed to ``Task.init`` (``project_name``, ``task_name``, ``tags``...).
    """

    name = "clearml"
    _run_attribute = "task"
    task: Task | None

    def __init__(self, run_name: str | None = None, **kwargs: object) -> None:
        super().__init__(run_name, **kwargs)
        self.user_provided_run_name = run_name
        self._initialized_externally = False
        self._dropped: set[str] = set()

    @on_main_process
    def start(self) -> None:
        """Use the current task, or ``Task.init`` a new one."""
        from clearml import Task

        current = Task.current_task()
        if current is not None:
            self.task, self._initialized_externally = current, True
            return
        kwargs = dict(self.init_kwargs)
        kwargs.setdefault(
            "project_name", os.environ.get("CLEARML_PROJECT", self.user_provided_run_name)
        )
        kwargs.setdefault("task_name", os.environ.get("CLEARML_TASK", self.user_provided_run_name))
        self.task = Task.init(**kwargs)  # type: ignore[arg-type]

    def _store_config(self, run: Task, config: dict[str, JSONValue]) -> None:
        """``task.connect_configuration(config)``."""
        run.connect_configuration(config)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """Numbers as scalars at ``step`` (single values without one); see the module docstring."""
        clearml_logger = self._started().get_logger()
        for key, value in values.items():
            found = number(value)
            if found is None:
                self._drop(key, value)
            elif step is None:
                clearml_logger.report_single_value(name=key, value=found, **kwargs)  # type: ignore[arg-type]
            else:
                title, series = title_and_series(key)
                clearml_logger.report_scalar(  # type: ignore[arg-type]
                    title=title, series=series, value=found, iteration=step, **kwargs
                )

    def _drop(self, key: str, value: object) -> None:
        if key not in self._dropped:
            self._dropped.add(key)
            logger.warning(
                "clearml tracker: %r = %r (%s) is not a number; ClearML reports scalars only, so "
                "it is not logged.",
                key,
                value,
                type(value).__name__,
            )

    @on_main_process
    def log_images(
        self, values: Mapping[str, object], step: int | None = None, **kwargs: object
    ) -> None:
        """``report_image`` for each value (an array or PIL image), titled like :meth:`log`."""
        clearml_logger = self._started().get_logger()
        for key, image in values.items():
            title, series = title_and_series(key)
            clearml_logger.report_image(  # type: ignore[arg-type]
                title=title, series=series, iteration=step, image=image, **kwargs
            )

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
        """``report_table`` of ``dataframe``, or of ``data`` with ``columns`` as its first row."""
        table = dataframe
        if table is None:
            if data is None:
                raise ValueError("ClearMLTracker.log_table needs data= when dataframe is None")
            table = [columns, *data] if columns else data
        title, series = title_and_series(table_name)
        self._started().get_logger().report_table(  # type: ignore[arg-type]
            title=title, series=series, table_plot=table, iteration=step, **kwargs
        )

    def _close(self, run: Task) -> None:
        """``task.close()``, unless the script started the task itself."""
        if not self._initialized_externally:
            run.close()
