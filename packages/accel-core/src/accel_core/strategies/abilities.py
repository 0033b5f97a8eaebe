"""Optional abilities of a strategy: small runtime-checkable protocols, tested with ``isinstance``.

A strategy has an ability by having its method; accel-core asks ``isinstance(strategy, ...)``
and never the strategy's name.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol, runtime_checkable

import torch

#: Any picklable value a collective moves (tensors, nested containers of them, objects).
CollectiveData = Any


@runtime_checkable
class SupportsNoSync(Protocol):
    """A strategy that can skip gradient synchronisation for one backward pass."""

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
        """A context in which backward passes through ``model`` do not synchronise gradients."""
        ...


@runtime_checkable
class SupportsJoin(Protocol):
    """A strategy that can train on inputs of different lengths per process."""

    def join(self, joinables: list[torch.nn.Module]) -> contextlib.AbstractContextManager[object]:
        """A context in which processes that ran out of batches shadow the collectives of others."""
        ...


@runtime_checkable
class SupportsShardedInit(Protocol):
    """A strategy that can build a model directly sharded or on the meta device.

    ``Accelerator.init_module(empty_init)`` enters this context around the user's model
    construction (DeepSpeed ZeRO-3: ``deepspeed.zero.Init``; FSDP: meta device on the ranks
    that will receive their weights from rank 0).
    """

    def module_init_context(
        self, empty_init: bool | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """A context under which modules are created the way this strategy wants them."""
        ...


@runtime_checkable
class SupportsCollectives(Protocol):
    """A strategy whose engine has its own collectives (XLA): the Accelerator's ``gather``,
    ``gather_for_metrics``, ``reduce`` and ``broadcast`` go through these instead of accel_ops."""

    def gather(self, data: CollectiveData) -> CollectiveData:
        """Concatenate ``data`` (tensors, nested) from every process along dim 0."""
        ...

    def gather_object(self, obj: object) -> list[object]:
        """Every process's picklable ``obj``, in rank order (lists are concatenated)."""
        ...

    def reduce(
        self, data: CollectiveData, reduction: str = "sum", scale: float = 1.0
    ) -> CollectiveData:
        """Reduce ``data`` across processes (``"sum"``, ``"mean"``, ``"none"``)."""
        ...

    def broadcast(self, data: CollectiveData, from_process: int = 0) -> CollectiveData:
        """``from_process``'s ``data`` on every process."""
        ...
