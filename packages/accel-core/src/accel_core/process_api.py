"""The process-level part of ``Accelerator``'s API, read from ``accel_ops.PartialState``.

``ProcessMixin`` gives the Accelerator ``process_index``, ``is_main_process``, ``print``,
``wait_for_everyone``, ``main_process_first``, ``on_main_process`` and the rest, each forwarding to
the process state, so that ``accelerator.X`` and ``PartialState().X`` always agree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accel_core.state import AcceleratorState
    from accel_ops import DistributedType


class ProcessMixin:
    """Mixin for classes with a ``state`` attribute (an ``AcceleratorState``)."""

    state: AcceleratorState

    @property
    def _partial(self) -> Any:
        return self.state.partial

    @property
    def device(self) -> torch.device:
        """The device of this process: the strategy's ``root_device`` (the process state's
        device before a strategy is chosen)."""
        strategy = self.state.strategy
        return strategy.root_device if strategy is not None else self._partial.device

    @property
    def distributed_type(self) -> DistributedType:
        """The strategy's ``accel_ops.DistributedType``."""
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        """The number of processes of the job."""
        return self._partial.num_processes

    @property
    def process_index(self) -> int:
        """The global rank of this process."""
        return self._partial.process_index

    @property
    def local_process_index(self) -> int:
        """The rank of this process on its machine."""
        return self._partial.local_process_index

    @property
    def use_distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self._partial.use_distributed

    @property
    def is_main_process(self) -> bool:
        """Whether this is the process of global rank 0."""
        return self._partial.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the process of rank 0 on its machine."""
        return self._partial.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """Whether this is the process of the highest global rank."""
        return self._partial.is_last_process

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine (on the local main process)."""
        self._partial.print(*args, **kwargs)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (no-op on one process)."""
        self._partial.wait_for_everyone()

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others."""
        with self._partial.main_process_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each machine's main process first, then on the others."""
        with self._partial.local_main_process_first():
            yield

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on the main process."""
        return self._partial.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on each machine's main process."""
        return self._partial.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on the last process."""
        return self._partial.on_last_process(function)

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` only on the process of global rank ``process_index``."""
        return self._partial.on_process(function, process_index=process_index)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` only on the process of local rank ``local_process_index``."""
        return self._partial.on_local_process(function, local_process_index=local_process_index)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Give each process its share of ``inputs`` (a list, tuple, dict of them, or tensor)."""
        with self._partial.split_between_processes(inputs, apply_padding=apply_padding) as part:
            yield part
