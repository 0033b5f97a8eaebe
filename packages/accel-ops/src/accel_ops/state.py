"""``PartialState``: this process's place in the job (rank, world size, device, process group)."""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from accel_ops import exit_teardown, inflight
from accel_ops.enums import DistributedType
from accel_ops.launch_environment import LaunchEnvironment
from accel_ops.process_group import as_timedelta, place_process
from accel_ops.splitting import split_inputs

_NEEDS_INIT = frozenset(
    {
        "backend",
        "debug",
        "device",
        "distributed_type",
        "local_process_index",
        "num_processes",
        "process_index",
        "timeout",
        "launch_environment",
    }
)


def is_initialized() -> bool:
    """Whether a :class:`PartialState` exists in this process (and was not reset)."""
    return bool(PartialState._shared_state)


def do_nothing(*args: Any, **kwargs: Any) -> None:
    """Take any arguments and return None: what the ``on_*_process`` decorators give the
    processes a function does not run on."""
    return None


class PartialState:
    """The state of this process, shared by every instance (one per process).

    The first ``PartialState()`` reads the launch environment (:class:`LaunchEnvironment`), joins
    the process group when there is more than one process (gloo on CPU, nccl on CUDA; an existing
    default group, e.g. one the user initialised, is reused) and picks the device. Later calls
    return a view of the same state and ignore their arguments. With one process no process
    group is formed and everything still works.

    Args:
        cpu: run on CPU even if an accelerator is present (also ``ACCEL_USE_CPU=1``).
        timeout: timeout of the process group and of every collective, as a ``timedelta`` or
            seconds (default ``ACCEL_PROCESS_GROUP_TIMEOUT``, 1800 s).
        debug: check shapes and dtypes across ranks before each collective (default
            ``ACCEL_DEBUG_MODE``).
        backend: process group backend (default gloo on CPU, nccl on CUDA).
        **init_kwargs: passed on to ``torch.distributed.init_process_group``.

    Attributes: ``process_index``, ``local_process_index``, ``num_processes``, ``device``,
    ``distributed_type``, ``backend``, ``debug``, ``timeout``, ``launch_environment``.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(
        self,
        cpu: bool = False,
        timeout: timedelta | float | None = None,
        debug: bool | None = None,
        backend: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        self.__dict__ = self._shared_state
        if self._shared_state:
            return
        env = LaunchEnvironment.from_environ()
        cpu = bool(cpu) or env.use_cpu
        group_timeout = as_timedelta(timeout, env.process_group_timeout)
        placement = place_process(env, cpu, group_timeout, backend, init_kwargs)
        self._cpu = cpu
        self.launch_environment = env
        self.timeout = group_timeout
        self.debug = env.debug if debug is None else bool(debug)
        self.backend = placement.backend
        self.distributed_type = placement.distributed_type
        self.num_processes = placement.num_processes
        self.process_index = placement.process_index
        self.local_process_index = placement.local_process_index
        self.device = placement.device
        self.fork_launched = False
        self._created_group = placement.created_group
        if self.num_processes > 1:
            exit_teardown.register()
            inflight.start_reporter(env.hang_report_dir, self.process_index)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes that are missing: the state was reset after this instance
        # was made.
        if name in _NEEDS_INIT:
            raise AttributeError(
                f"`PartialState` object has no attribute `{name}`. This happens if "
                "`PartialState._reset_state()` was called and an `Accelerator` or `PartialState` "
                "was not reinitialized: create it again with PartialState()."
            )
        raise AttributeError(f"'PartialState' object has no attribute {name!r}")

    def __repr__(self) -> str:
        backend = f"  Backend: {self.backend}" if self.backend else ""
        return (
            f"Distributed environment: {self.distributed_type}{backend}\n"
            f"Num processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )

    @staticmethod
    def _reset_state() -> None:
        """Forget the shared state (for tests). Does not destroy the process group."""
        PartialState._shared_state.clear()

    @property
    def initialized(self) -> bool:
        """Whether the shared state exists."""
        return bool(self._shared_state)

    @property
    def use_distributed(self) -> bool:
        """Whether more than one process takes part (collectives communicate)."""
        return self.distributed_type != DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        """Whether this is the process with global index 0."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the process with local index 0 on its machine."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """Whether this is the process with the highest global index."""
        return self.process_index == self.num_processes - 1

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for on one process)."""
        if not self.use_distributed:
            return
        from accel_ops import _comm

        comm = _comm.resolve()
        if comm is None:
            return
        nccl = {"device_ids": [self.device.index]} if self.backend == "nccl" else {}
        _comm.call("wait_for_everyone", comm, dist.barrier, **nccl)

    def _goes_first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others together."""
        yield from self._goes_first(self.is_main_process)

    @contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each machine's local main process first, then on the others."""
        yield from self._goes_first(self.is_local_main_process)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on the main process (elsewhere it returns None)."""
        if function is None:
            return self.on_main_process
        return function if self.is_main_process or not self.use_distributed else do_nothing

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on each machine's local main process."""
        if function is None:
            return self.on_local_main_process
        keep = self.is_local_main_process or not self.use_distributed
        return function if keep else do_nothing

    def on_last_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on the last process."""
        if function is None:
            return self.on_last_process
        return function if self.is_last_process or not self.use_distributed else do_nothing

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` only on the process with global index ``process_index``."""
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        if process_index is None:
            raise TypeError(
                "on_process needs process_index=, e.g. @state.on_process(process_index=1)"
            )
        keep = self.process_index == process_index or not self.use_distributed
        return function if keep else do_nothing

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` only on the process with this ``local_process_index``."""
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        if local_process_index is None:
            raise TypeError(
                "on_local_process needs local_process_index=, e.g. "
                "@state.on_local_process(local_process_index=0)"
            )
        keep = self.local_process_index == local_process_index or not self.use_distributed
        return function if keep else do_nothing

    @contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Give this process its share of ``inputs`` (a list, tuple, tensor, or dict of those).

        Shares are contiguous and the first ``len % num_processes`` processes get one item more.
        With ``apply_padding`` every share is as long as the longest, padded by repeating the last
        item of ``inputs`` (drop those results afterwards). On one process ``inputs`` is yielded
        unchanged. A dict's values must all have the same length.
        """
        yield split_inputs(inputs, self.num_processes, self.process_index, apply_padding)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only (once per machine)."""
        if self.is_local_main_process:
            builtins.print(*args, **kwargs)

    @property
    def default_device(self) -> torch.device:
        """The device this process uses (same as ``device``)."""
        return self.device

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group`` (the default group when None) if torch.distributed is initialised."""
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)
