"""Tracker names -> tracker classes, imported only when a tracker is used.

Three sources, looked up in this order:

1. classes registered in this process with :func:`register_tracker_class` (Accelerate's API);
2. the ``accel.trackers`` entry-point group of installed packages::

       [project.entry-points."accel.trackers"]
       my_tracker = "my_package.tracking:MyTracker"

3. the built-in trackers below, each with the module that must be importable for it to work and
   the accel-core extra that installs it.

``log_with`` is checked when the ``Accelerator`` is created (:func:`filter_trackers`: unknown names
fail at once); a backend that is not installed fails when ``init_trackers`` is called, with the
``pip install`` line that brings it (:func:`tracker_class`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from accel_core.configuration import LoggerType
from accel_core.tracking.base import GeneralTracker

ENTRY_POINT_GROUP = "accel.trackers"
JSONL = "jsonl"


@dataclass(frozen=True)
class BuiltInTracker:
    """A tracker that ships with accel-core: where its class is and what it needs installed."""

    target: str  # "module:Class"
    modules: tuple[str, ...]  # any one of them importable means installed
    extra: str | None  # accel-core extra that installs the backend

    @property
    def pip_line(self) -> str:
        """The command that installs the backend."""
        return f'pip install "accel-core[{self.extra}]"'


_BUILT_IN: dict[str, BuiltInTracker] = {
    LoggerType.TENSORBOARD.value: BuiltInTracker(
        "accel_core.tracking.tensorboard_tracker:TensorBoardTracker",
        ("tensorboard", "tensorboardX"),
        "tensorboard",
    ),
    LoggerType.WANDB.value: BuiltInTracker(
        "accel_core.tracking.wandb_tracker:WandBTracker", ("wandb",), "wandb"
    ),
    LoggerType.MLFLOW.value: BuiltInTracker(
        "accel_core.tracking.mlflow_tracker:MLflowTracker", ("mlflow",), "mlflow"
    ),
    LoggerType.AIM.value: BuiltInTracker(
        "accel_core.tracking.aim_tracker:AimTracker", ("aim",), "aim"
    ),
    LoggerType.COMETML.value: BuiltInTracker(
        "accel_core.tracking.comet_tracker:CometMLTracker", ("comet_ml",), "comet"
    ),
    LoggerType.TRACKIO.value: BuiltInTracker(
        "accel_core.tracking.trackio_tracker:TrackioTracker", ("trackio",), "trackio"
    ),
    LoggerType.CLEARML.value: BuiltInTracker(
        "accel_core.tracking.clearml_tracker:ClearMLTracker", ("clearml",), "clearml"
    ),
    LoggerType.DVCLIVE.value: BuiltInTracker(
        "accel_core.tracking.dvclive_tracker:DVCLiveTracker", ("dvclive",), "dvclive"
    ),
    LoggerType.SWANLAB.value: BuiltInTracker(
        "accel_core.tracking.swanlab_tracker:SwanLabTracker", ("swanlab",), "swanlab"
    ),
    JSONL: BuiltInTracker("accel_core.tracking.jsonl_tracker:JSONLinesTracker", (), None),
}

_registered: dict[str, type[GeneralTracker]] = {}

LogWithEntry = str | LoggerType | GeneralTracker
"""One element of ``Accelerator(log_with=...)``: a tracker name or a tracker object."""


class UnknownTrackerError(ValueError):
    """A tracker name that no built-in, entry point or registered class provides."""


class TrackerNotInstalledError(ImportError):
    """A known tracker whose backend package is not installed."""


def register_tracker_class(tracker_class: type[GeneralTracker], name: str | None = None) -> None:
    """Make ``tracker_class`` usable by its ``name`` in ``log_with`` and ``init_kwargs``.

    Register it before creating the ``Accelerator`` that names it. The class is built as
    ``tracker_class(project_name, **init_kwargs[name])``, with the logging directory as second
    positional argument when ``requires_logging_directory`` is true. Registering a name again, a
    built-in one included, replaces the earlier class (with a warning). ``name`` registers the
    class under another name than its own (``LOGGER_TYPE_TO_CLASS[name] = cls`` does that).
    """
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise ValueError(
            f"`tracker_class` must be a subclass of `GeneralTracker`, but got {tracker_class!r} "
            f"(register_tracker_class expects a subclass of accel_core.tracking.GeneralTracker)"
        )
    if name is None:
        name = getattr(tracker_class, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{tracker_class.__name__} needs a non-empty `name` class attribute (the name used in "
            "log_with) to be registered"
        )
    if not isinstance(getattr(tracker_class, "requires_logging_directory", None), bool):
        raise ValueError(
            f"{tracker_class.__name__} needs a `requires_logging_directory` class attribute: True "
            "when it is built with the logging directory, False otherwise"
        )
    key = name.lower()
    if key in _registered or key in _BUILT_IN:
        warnings.warn(
            f"a tracker named {name!r} is already known; {tracker_class.__name__} replaces it",
            stacklevel=2,
        )
    _registered[key] = tracker_class


def unregister_tracker_class(name: str) -> None:
    """Forget a class registered with :func:`register_tracker_class` (tests, plugins)."""
    _registered.pop(name.lower(), None)


def is_registered(name: str) -> bool:
    """Whether a class was registered under ``name`` in this process."""
    return name.lower() in _registered


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name.lower(): ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def known_trackers() -> list[str]:
    """Every tracker name that ``log_with`` accepts here (installed or not), sorted."""
    return sorted({*_BUILT_IN, *_entry_points(), *_registered})


def is_installed(name: str) -> bool:
    """Whether tracker ``name`` can be used here (its backend is importable; nothing is imported).

    Registered and entry-point trackers count as installed.
    """
    key = name.lower()
    if key in _registered or key in _entry_points():
        return True
    built_in = _BUILT_IN.get(key)
    if built_in is None:
        return False
    return not built_in.modules or any(_importable(module) for module in built_in.modules)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def get_available_trackers() -> list[LoggerType | str]:
    """The built-in trackers whose backend is installed (what ``log_with="all"`` picks)."""
    return [_entry(name) for name in _BUILT_IN if is_installed(name)]


def pip_line(name: str) -> str | None:
    """The ``pip install`` command for a built-in tracker's backend, ``None`` for the others."""
    built_in = _BUILT_IN.get(name.lower())
    return built_in.pip_line if built_in is not None and built_in.extra else None


def _entry(name: str) -> LoggerType | str:
    """A name as stored in ``accelerator.log_with``: the ``LoggerType`` member when there is one."""
    try:
        return LoggerType(name)
    except ValueError:
        return name


def _unknown(value: object) -> UnknownTrackerError:
    known = ", ".join(repr(name) for name in known_trackers())
    return UnknownTrackerError(
        f"log_with={value!r} is not a known tracker. Known trackers: {known}, or 'all' (every "
        "installed one); or pass a GeneralTracker instance."
    )


# The backends the ``trackers`` extra installs (pyproject.toml); ClearML, DVCLive and SwanLab have
# an extra each but are not in it.
_IN_TRACKERS_EXTRA = {"tensorboard", "mlflow", "wandb", "aim", "comet", "trackio"}


def tracker_class(name: str, installed_only: bool = True) -> type[GeneralTracker]:
    """The class of tracker ``name``; raises when unknown or (``installed_only``) when its
    backend is missing.

    :class:`UnknownTrackerError` lists the known names; :class:`TrackerNotInstalledError` gives
    the ``pip install`` line. A built-in class is importable without its backend, which it
    imports only when it starts.
    """
    key = name.lower()
    if key in _registered:
        return _registered[key]
    found = _entry_points().get(key)
    if found is not None:
        loaded = found.load()
        if not (isinstance(loaded, type) and issubclass(loaded, GeneralTracker)):
            raise TypeError(
                f"the entry point {found.value!r} of tracker {name!r} (group "
                f"{ENTRY_POINT_GROUP!r}) is {loaded!r}, not a GeneralTracker subclass; fix the "
                "package that declares it"
            )
        return loaded
    built_in = _BUILT_IN.get(key)
    if built_in is None:
        raise _unknown(name)
    if installed_only and not is_installed(key):
        raise TrackerNotInstalledError(
            f"the {name} tracker needs {' or '.join(built_in.modules)}, which is not installed. "
            f"Install it with `{built_in.pip_line}`"
            + (
                ' (or `pip install "accel-core[trackers]"` for the common trackers).'
                if built_in.extra in _IN_TRACKERS_EXTRA
                else "."
            )
        )
    module, _, attribute = built_in.target.partition(":")
    loaded_class: type[GeneralTracker] = getattr(importlib.import_module(module), attribute)
    return loaded_class


def requires_logging_directory(name: str) -> bool:
    """Whether tracker ``name`` is built with a logging directory (its class is imported; the
    backend is not)."""
    return bool(tracker_class(name, installed_only=False).requires_logging_directory)


def filter_trackers(
    log_with: LogWithEntry | Sequence[LogWithEntry] | None,
    logging_dir: str | os.PathLike[str] | None = None,
) -> list[LogWithEntry]:
    """The trackers that ``Accelerator(log_with=...)`` names, checked and without repeats.

    ``log_with`` is a name (``"tensorboard"``), a :class:`~accel_core.LoggerType`, a
    :class:`GeneralTracker` instance, or a list of these; ``"all"`` means every built-in tracker
    whose backend is installed (those that need a logging directory are left out, with a
    warning, when there is none). Unknown names raise :class:`UnknownTrackerError`; a tracker that
    needs a logging directory raises ``ValueError`` when there is none. A backend that is not
    installed is not an error here: ``init_trackers`` raises it with the ``pip install`` line.
    """
    if log_with is None:
        return []
    entries: list[object] = (
        list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]  # type: ignore[arg-type]
    )
    chosen: list[LogWithEntry] = []
    names: set[str] = set()
    wants_all = False
    for entry in entries:
        if isinstance(entry, GeneralTracker):
            chosen.append(entry)
            continue
        if isinstance(entry, type) and issubclass(entry, GeneralTracker):
            raise TypeError(
                f"log_with got the class {entry.__name__}; pass an instance of it, or register "
                "the class with register_tracker_class and pass its name"
            )
        if not isinstance(entry, str):
            raise _unknown(entry)
        key = str(entry.value if isinstance(entry, LoggerType) else entry).strip().lower()
        if key == LoggerType.ALL.value:
            wants_all = True
            continue
        if key not in known_trackers():
            raise _unknown(entry)
        if logging_dir is None and requires_logging_directory(key):
            raise ValueError(
                f"Logging with `{key}` requires a `logging_dir` to be passed in: pass "
                "Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...)"
            )
        if key not in names:
            names.add(key)
            chosen.append(_entry(key))
    if wants_all:
        skipped = []
        for name in _BUILT_IN:
            if name in names or not is_installed(name):
                continue
            if logging_dir is None and requires_logging_directory(name):
                skipped.append(name)
                continue
            names.add(name)
            chosen.append(_entry(name))
        if skipped:
            warnings.warn(
                f"log_with='all' leaves out {', '.join(skipped)}: they need a logging directory. "
                "Pass Accelerator(project_dir=...) to include them.",
                stacklevel=3,
            )
    return chosen
