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

from accel_core.tracking.base import GeneralTracker, on_main_process, require_started
from accel_core.tracking.config_values import to_json

if TYPE_CHECKING:
    from dvclive import Live

logger = logging.getLogger(__name__)


class DVCLiveTracker(GeneralTracker):
    """A DVCLive experiment.

    Args:
        run_name: ignored (DVCLive has no run name; see ``kwargs``).
        live: a ``dvclive.Live`` to log to instead of a new one.
        **kwargs: passed to ``dvclive.Live`` (``dir``, ``save_dvc_exp``, ``report``...).
    """

    name = "dvclive"
    requires_logging_directory = False

    def __init__(
        self, run_name: str | None = None, live: Live | None = None, **kwargs: object
    ) -> None:
        super().__init__()
        self.live = live
        self.init_kwargs = dict(kwargs)
        self._dropped: set[str] = set()

    @property
    def tracker(self) -> Live | None:
        """The ``dvclive.Live``."""
        return self.live

    @on_main_process
    def start(self) -> None:
        """``dvclive.Live(**kwargs)``, unless one was given."""
        from dvclive import Live

        if self.live is None:
            self.live = Live(**self.init_kwargs)  # type: ignore[arg-type]

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """``live.log_params`` with ``values`` made JSON-safe (``params.yaml``)."""
        config = to_json(values)
        self._live().log_params(config if isinstance(config, dict) else {"config": config})

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``live.log_metric`` for each value DVCLive can plot, then ``live.next_step()``."""
        from dvclive.plots import Metric

        live = self._live()
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

    def _live(self) -> Live:
        return require_started(self.live, "dvclive")

    @on_main_process
    def finish(self) -> None:
        """``live.end()``."""
        if self.live is not None:
            self.live.end()
