"""``log_with="dvclive"``: a DVCLive ``Live`` (``dvclive.Live(**init_kwargs)``).

DVCLive ignores the project name; ``init_kwargs={"dvclive": {"dir": ..., ...}}`` go to ``Live``
(default folder ``dvclive/``: ``params.yaml``, ``metrics.json``, ``plots/metrics/*.tsv``). A
``Live`` made by the script can be given as ``live=``. Each :meth:`DVCLiveTracker.log` call is one
DVCLive step (``live.next_step()``), at ``step`` when given; values DVCLive can't plot are dropped
with one warning per key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from accel_core.tracking.base import JSONValue, on_main_process
from accel_core.tracking.run_tracker import RunTracker

if TYPE_CHECKING:
    from dvclive import Live

logger = logging.getLogger(__name__)


class DVCLiveTracker(RunTracker["Live"]):
    """A DVCLive experiment.

    Args:
        run_name: ignored (DVCLive has no run name; see ``kwargs``).
        live: a ``dvclive.Live`` to log to instead of a new one.
        **kwargs: passed to ``dvclive.Live`` (``dir``, ``save_dvc_exp``, ``report``...).
    """

    name = "dvclive"
    _run_attribute = "live"
    live: Live | None

    def __init__(
        self, run_name: str | None = None, live: Live | None = None, **kwargs: object
    ) -> None:
        super().__init__(run_name, **kwargs)
        self.live = live
        self._dropped: set[str] = set()

    @on_main_process
    def start(self) -> None:
        """``dvclive.Live(**kwargs)``, unless one was given."""
        from dvclive import Live

        if self.live is None:
            self.live = Live(**self.init_kwargs)  # type: ignore[arg-type]

    def _store_config(self, run: Live, config: dict[str, JSONValue]) -> None:
        """``live.log_params(config)`` (``params.yaml``)."""
        run.log_params(config)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``live.log_metric`` for each value DVCLive can plot, then ``live.next_step()``."""
        from dvclive.plots import Metric

        live = self._started()
        if step is not None:
            live.step = step
        for key, value in values.items():
            if Metric.could_log(value):
                live.log_metric(key, value, **kwargs)  # type: ignore[arg-type]
            elif key not in self._dropped:
                self._dropped.add(key)
                logger.warning(
                    "dvclive tracker: %r = %r (%s) can't be logged as a metric; it is dropped.",
                    key,
                    value,
                    type(value).__name__,
                )
        live.next_step()

    def _close(self, run: Live) -> None:
        """``live.end()``."""
        run.end()
