"""Logging that knows about processes: log once, on every process, or rank by rank.

``get_logger(__name__)`` returns a standard ``logging.LoggerAdapter``; handlers, formatters and
levels are configured with the standard ``logging`` module as usual. Each logging call takes two
extra keyword arguments:

- ``main_process_only`` (default True): only the main process emits the record;
- ``in_order`` (default False): every process emits it, one rank after the other (rank 0 first);
  every process must make the call, since the ranks wait for each other in between.

Messages are prefixed with ``[RANK <process index>]``. The process state (``PartialState()`` or
``Accelerator()``) must exist before the first record is emitted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

LOG_LEVEL_ENV = "ACCEL_LOG_LEVEL"
ACCELERATE_LOG_LEVEL_ENV = "ACCELERATE_LOG_LEVEL"  # Accelerate's name, read when ours is unset


def _process_state() -> Any:
    import accel_ops

    if not accel_ops.is_initialized():
        raise RuntimeError(
            "get_logger's loggers need the process state to know which process they run in: "
            "create PartialState() or Accelerator() before logging."
        )
    return accel_ops.PartialState()


class MultiProcessAdapter(logging.LoggerAdapter):
    """A ``LoggerAdapter`` whose calls accept ``main_process_only`` and ``in_order``."""

    def __init__(self, logger: logging.Logger, extra: dict | None = None) -> None:
        super().__init__(logger, extra or {})
        self._warned: set[str] = set()

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        """Prefix the message with the rank and point the record at the caller's line."""
        msg, kwargs = super().process(msg, kwargs)
        kwargs.setdefault("stacklevel", 2)  # skip this module's frame in Logger.findCaller
        return f"[RANK {_process_state().process_index}] {msg}", kwargs

    def log(
        self,
        level: int,
        msg: Any,
        *args: Any,
        main_process_only: bool = True,
        in_order: bool = False,
        **kwargs: Any,
    ) -> None:
        """Emit ``msg`` on the main process only, on every process, or on every process in order.

        ``in_order=True`` overrides ``main_process_only``: each process emits the record in turn,
        rank 0 first, and waits for the others in between, so all processes must make the call.
        """
        if not self.isEnabledFor(level):
            return
        state = _process_state()
        msg, kwargs = self.process(msg, kwargs)
        if in_order:
            for rank in range(state.num_processes):
                if rank == state.process_index:
                    self.logger.log(level, msg, *args, **kwargs)
                    for handler in _handlers(self.logger):
                        handler.flush()
                state.wait_for_everyone()
        elif not main_process_only or state.is_main_process:
            self.logger.log(level, msg, *args, **kwargs)

    def warning_once(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """``warning(msg, *args, **kwargs)`` the first time it is called with these arguments.

        The arguments identify the warning, whichever line makes the call.
        """
        key = repr((msg, args, sorted(kwargs.items())))
        if key in self._warned:
            return
        self._warned.add(key)
        kwargs.setdefault("stacklevel", 3)  # also skip warning_once's own frame
        self.warning(msg, *args, **kwargs)


def _handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers a record from ``logger`` reaches, following propagation."""
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found.extend(current.handlers)
        current = current.parent if current.propagate else None
    return found


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """A process-aware logger for ``name`` (usually ``__name__``).

    ``log_level`` (``"DEBUG"``, ``"INFO"``, ``"WARNING"``, ``"ERROR"``, ``"CRITICAL"``, any case)
    sets the level of this logger; when None, the ``ACCEL_LOG_LEVEL`` environment variable does
    (else Accelerate's ``ACCELERATE_LOG_LEVEL``), and when both are unset the level is left as it
    is. Unlike Accelerate, the root logger's level is not changed.

    Example::

        logger = get_logger(__name__, log_level="INFO")
        accelerator = Accelerator()
        logger.info("on the main process")
        logger.info("on every process", main_process_only=False)
        logger.info(f"shard {accelerator.process_index}", in_order=True)
    """
    source = "log_level"
    if log_level is None:
        for source in (LOG_LEVEL_ENV, ACCELERATE_LOG_LEVEL_ENV):
            log_level = os.environ.get(source) or None
            if log_level is not None:
                break
    logger = logging.getLogger(name)
    if log_level is not None:
        level = str(log_level).strip().upper()
        if not isinstance(logging.getLevelName(level), int):
            raise ValueError(
                f"{source}={log_level!r} is not a logging level; use one of DEBUG, INFO, WARNING, "
                f"ERROR, CRITICAL."
            )
        logger.setLevel(level)
    return MultiProcessAdapter(logger)
