"""``log_with="swanlab"``: a SwanLab run (``swanlab.init(project=project_name, ...)``).

``init_kwargs={"swanlab": {...}}`` go to ``swanlab.init`` (``experiment_name``, ``mode`` --
``"cloud"``, ``"local"``, ``"offline"`` or ``"disabled"`` -- ``logdir``...); where it writes is
SwanLab's choice from those and its own settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from accel_core.tracking.base import GeneralTracker, on_main_process, require_started
from accel_core.tracking.config_values import to_json

if TYPE_CHECKING:
    from swanlab import Run


class SwanLabTracker(GeneralTracker):
    """A SwanLab run.

    Args:
        run_name: the project name (``swanlab.init(project=...)``).
        **kwargs: passed to ``swanlab.init``.
    """

    name = "swanlab"
    requires_logging_directory = False

    def __init__(self, run_name: str, **kwargs: object) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = dict(kwargs)
        self.run: Run | None = None

    @property
    def tracker(self) -> Run | None:
        """The SwanLab run."""
        return self.run

    @on_main_process
    def start(self) -> None:
        """``swanlab.init(project=run_name, **kwargs)``."""
        import swanlab

        self.run = swanlab.init(project=self.run_name, **self.init_kwargs)  # type: ignore[arg-type]

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """``swanlab.config.update`` with ``values`` made JSON-safe."""
        import swanlab

        require_started(self.run, "swanlab")
        config = to_json(values)
        swanlab.config.update(config if isinstance(config, dict) else {"config": config})

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """``run.log(values, step=step, **kwargs)``."""
        require_started(self.run, "swanlab").log(dict(values), step=step, **kwargs)  # type: ignore[arg-type]

    @on_main_process
    def log_images(
        self, values: Mapping[str, Sequence[object]], step: int | None = None, **kwargs: object
    ) -> None:
        """Each value, a list of arrays or PIL images, as a list of ``swanlab.Image``."""
        import swanlab

        for key, images in values.items():
            self.log({key: [swanlab.Image(image) for image in images]}, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """``run.finish()``."""
        if self.run is not None:
            self.run.finish()
