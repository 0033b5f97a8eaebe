"""``tqdm`` that shows its bar on one process per machine only (Accelerate's ``utils.tqdm``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_ops.availability import is_tqdm_available

if TYPE_CHECKING:
    from tqdm.auto import tqdm as _Tqdm


def _local_process_index() -> int:
    from accel_ops.launch_environment import LaunchEnvironment
    from accel_ops.state import PartialState

    shared = PartialState._shared_state
    if shared:
        return int(shared["local_process_index"])
    return LaunchEnvironment.from_environ().local_rank


def tqdm(*args: object, main_process_only: bool = True, **kwargs: object) -> _Tqdm:
    """A ``tqdm.auto.tqdm`` progress bar, shown only on the local main process by default.

    ``main_process_only=False`` shows it on every process; ``disable=True`` hides it everywhere.
    The process's local rank comes from the current :class:`~accel_ops.PartialState`, else from
    the launch environment (no state is created). Raises ``ImportError`` when tqdm is not
    installed, and ``ValueError`` when the first argument is a bool (Accelerate's old signature
    took ``main_process_only`` first; pass it by name).
    """
    if not is_tqdm_available():
        raise ImportError("accel_ops.tqdm needs the tqdm package: pip install tqdm")
    if args and isinstance(args[0], bool):
        raise ValueError(
            "tqdm(True, ...) / tqdm(False, ...) is not supported: pass main_process_only= by "
            "keyword, e.g. tqdm(range(10), main_process_only=False)"
        )
    from tqdm.auto import tqdm as progress_bar

    disable = bool(kwargs.pop("disable", False))
    if main_process_only and not disable:
        disable = _local_process_index() != 0
    return progress_bar(*args, disable=disable, **kwargs)
