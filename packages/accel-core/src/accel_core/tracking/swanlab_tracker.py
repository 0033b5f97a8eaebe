"""``log_with="swanlab"``: a SwanLab run (``swanlab.init(project=project_name, ...)``).

``init_kwargs={"swanlab": {...}}`` go to ``swanlab.init`` (``experiment_name``, ``mode`` --
``"cloud"``, ``"local"``, ``"offline"`` or ``"disabled"`` -- ``logdir``...); where it writes is
SwanLab's choice from those and its own settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from accel_core.tracking.base import JSONValue, on_main_process
from accel_core.tracking.run_tracker import RunTracker

if TYPE_CHECKING:
    from swanlab import Run


class SwanLabTracker(RunTracker["Run"]):
    """A SwanLab run.

    Args:
        run_name: the project name (``swanlab.init(project=...)``).
        **kwargs: passed to ``swanlab.init``.
    """

    name = "swanlab"
    run: Run | None

    def __init__(self, run_name: str, **kwargs: object) -> None:
        super().__init__(run_name, **kwargs)

    @on_main_process
    def start(self) -> None:
        """``swanlab.init(project=run_name, **kwargs)``."""
        import swanlab

        self.run = swanlab.init(project=self.run_name, **self.init_kwargs)  # type: ignore[arg-type]

    def _store_config(self, run: Run, config: dict[str, JSONValue]) -> None:
        """``swanlab.config.update(config)``."""
        import swanlab

        swanlab.config.update(config)

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``run.log(values, step=step, **kwargs)``."""
        self._started().log(dict(values), step=step, **kwargs)  # type: ignore[arg-type]

    @on_main_process
    def log_images(
        self, values: Mapping[str, Sequence[object]], step: int | None = None, **kwargs: object
    ) -> None:
        """Each value, a list of arrays or PIL images, as a list of ``swanlab.Image``."""
        import swanlab

        for key, images in values.items():
            self.log({key: [swanlab.Image(image) for image in images]}, step=step, **kwargs)
