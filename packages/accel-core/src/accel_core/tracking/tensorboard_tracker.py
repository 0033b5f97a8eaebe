"""``log_with="tensorboard"``: event files through ``torch.utils.tensorboard`` (or tensorboardX).

Writes in ``<logging_dir>/<project_name>/`` (Accelerate's layout). The config goes into the same
event file as the metrics, as TensorBoard hparams (flattened to ``a.b`` keys, each value made an
int, float, str or bool), and as ``hparams.json`` (nesting kept) next to it. With a config, the
run's hparams session ends with status success, or failure when the process ended by an uncaught
exception.

Resuming reopens the same directory with ``purge_step`` = the checkpoint's last step + 1, so
TensorBoard hides what the interrupted attempt logged after the checkpoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from accel_core.tracking.base import (
    GeneralTracker,
    JSONValue,
    TrackerState,
    on_main_process,
    require_started,
)
from accel_core.tracking.config_values import flatten, number, to_json, to_scalar

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class TensorBoardTracker(GeneralTracker):
    """TensorBoard event files in ``<logging_dir>/<run_name>``.

    Args:
        run_name: the project name (the run's folder).
        logging_dir: the Accelerator's logging directory.
        **kwargs: passed to ``SummaryWriter`` (``flush_secs``, ``filename_suffix``...).
    """

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: object
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir_param = os.fspath(logging_dir)
        self.logging_dir = os.path.join(self.logging_dir_param, run_name)
        self.init_kwargs = dict(kwargs)
        self.writer: SummaryWriter | None = None
        self._has_hparams = False
        self._ended = False
        self._last_step: int | None = None
        self._logged = False
        self._resume_state: dict[str, JSONValue] | None = None

    @property
    def tracker(self) -> SummaryWriter | None:
        """The ``SummaryWriter``."""
        return self.writer

    @on_main_process
    def start(self) -> None:
        """Open a ``SummaryWriter`` on the run folder (the saved folder when resuming)."""
        kwargs = dict(self.init_kwargs)
        state = self._resume_state
        if state is not None:
            if isinstance(state.get("log_dir"), str):
                self.logging_dir = str(state["log_dir"])
            step = state.get("step")
            if isinstance(step, int):
                kwargs.setdefault("purge_step", step + 1)
                self._last_step = step
        self.writer = _summary_writer_class()(self.logging_dir, **kwargs)
        self._logged = False
        self._ended = False

    @on_main_process
    def store_init_configuration(self, values: Mapping[str, object]) -> None:
        """Record ``values`` as hparams (scalars) and in ``hparams.json`` (as given)."""
        writer = self._writer()
        hparams = {key: to_scalar(value) for key, value in flatten(values).items()}
        for summary in _hparams_summaries(hparams):
            writer._get_file_writer().add_summary(summary)
        writer.flush()
        self._has_hparams = True
        Path(self.logging_dir, "hparams.json").write_text(
            json.dumps(to_json(values), indent=1, sort_keys=True), encoding="utf-8"
        )

    @on_main_process
    def log(self, values: Mapping[str, object], step: int | None = None, **kwargs: object) -> None:
        """Numbers as scalars, strings as text, dicts of numbers through ``add_scalars``.

        ``kwargs`` go to those ``SummaryWriter`` methods (``walltime``...).
        """
        writer = self._writer()
        for key, value in values.items():
            as_number = number(value)
            if as_number is not None:
                writer.add_scalar(key, as_number, global_step=step, **kwargs)  # type: ignore[arg-type]
            elif isinstance(value, str):
                writer.add_text(key, value, global_step=step, **kwargs)  # type: ignore[arg-type]
            elif isinstance(value, Mapping):
                scalars = {str(k): float(v) for k, v in value.items() if number(v) is not None}
                writer.add_scalars(key, scalars, global_step=step, **kwargs)  # type: ignore[arg-type]
        writer.flush()
        self._logged = True
        if step is not None:
            self._last_step = step

    @on_main_process
    def log_images(
        self, values: Mapping[str, object], step: int | None = None, **kwargs: object
    ) -> None:
        """``SummaryWriter.add_images`` for each value (a batch of images, NCHW by default)."""
        writer = self._writer()
        for key, images in values.items():
            writer.add_images(key, images, global_step=step, **kwargs)  # type: ignore[arg-type]
        writer.flush()
        self._logged = True

    def run_state(self) -> TrackerState:
        """``{"log_dir": folder, "step": the last step logged}``."""
        if self.writer is None:
            return {}
        return {"log_dir": self.logging_dir, "step": self._last_step}

    def resume(self, state: Mapping[str, JSONValue]) -> None:
        """Write into the saved folder again, from the saved step on (an event file of the current
        run with no metrics in it is removed)."""
        self._resume_state = dict(state)
        if self.writer is None:
            return
        writer, self.writer = self.writer, None
        event_file = _event_file(writer)
        writer.close()
        if not self._logged and event_file is not None:  # header and config (stored again)
            event_file.unlink(missing_ok=True)
            saved = state.get("log_dir")
            if isinstance(saved, str) and Path(saved) != event_file.parent:
                (event_file.parent / "hparams.json").unlink(missing_ok=True)
                try:
                    event_file.parent.rmdir()
                except OSError:  # other files are there
                    pass
        self._has_hparams = False
        self.start()

    def _writer(self) -> SummaryWriter:
        return require_started(self.writer, "tensorboard")

    def _end(self, failed: bool) -> None:
        writer = self.writer
        if writer is None or self._ended:
            return
        self._ended = True
        if self._has_hparams:
            summary = _session_end_summary(failed)
            if summary is not None:
                writer._get_file_writer().add_summary(summary)
        writer.close()

    @on_main_process
    def finish(self) -> None:
        """Close the writer (hparams session status: success)."""
        self._end(failed=False)

    @on_main_process
    def fail(self, error: BaseException) -> None:
        """Close the writer (hparams session status: failure)."""
        self._end(failed=True)


def _event_file(writer: SummaryWriter) -> Path | None:
    """The event file ``writer`` writes (``None`` where the writer does not say)."""
    name = getattr(writer._get_file_writer().event_writer, "_file_name", None)
    return Path(name) if isinstance(name, str) else None


def _summary_writer_class() -> type[SummaryWriter]:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ModuleNotFoundError:
        from tensorboardX import SummaryWriter  # type: ignore[no-redef]
    return SummaryWriter


def _hparams_summaries(hparams: dict[str, int | float | str | bool]) -> list[object]:
    """The experiment and session-start summaries of the hparams plugin (no session end yet)."""
    try:
        from torch.utils.tensorboard.summary import hparams as make_hparams
    except ModuleNotFoundError:
        from tensorboardX.summary import hparams as make_hparams  # type: ignore[no-redef]
    experiment, session_start, _ = make_hparams(hparams, {})
    return [experiment, session_start]


def _session_end_summary(failed: bool) -> object | None:
    """The hparams plugin's session-end summary with its status (``None`` without tensorboard)."""
    try:
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
        from tensorboard.plugins.hparams.metadata import PLUGIN_NAME, SESSION_END_INFO_TAG
    except ModuleNotFoundError:
        return None
    status = api_pb2.Status.STATUS_FAILURE if failed else api_pb2.Status.STATUS_SUCCESS
    content = plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=status), version=0
    )
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=content.SerializeToString()
        )
    )
    return Summary(value=[Summary.Value(tag=SESSION_END_INFO_TAG, metadata=metadata)])
