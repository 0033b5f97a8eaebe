"""The collectives accel-core uses, routed through the strategy when its engine has its own.

A strategy that is :class:`~accel_core.strategies.SupportsCollectives` (XLA) answers
``gather``, ``gather_object``, ``reduce`` and ``broadcast``; any other strategy gets accel_ops'
implementations over the process group (interface 2 of the design).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_core.strategies.base import CollectiveData, SupportsCollectives

if TYPE_CHECKING:
    from accel_core.strategies import Strategy


class ProcessGroupCollectives:
    """accel_ops' collectives over the current process group."""

    def gather(self, data: CollectiveData) -> CollectiveData:
        """``accel_ops.gather``."""
        from accel_ops import gather

        return gather(data)

    def gather_object(self, obj: object) -> list[object]:
        """``accel_ops.gather_object``."""
        from accel_ops import gather_object

        return gather_object(obj)

    def reduce(
        self, data: CollectiveData, reduction: str = "sum", scale: float = 1.0
    ) -> CollectiveData:
        """``accel_ops.reduce``."""
        from accel_ops import reduce

        return reduce(data, reduction=reduction, scale=scale)

    def broadcast(self, data: CollectiveData, from_process: int = 0) -> CollectiveData:
        """``accel_ops.broadcast``."""
        from accel_ops import broadcast

        return broadcast(data, from_process=from_process)


_DEFAULT = ProcessGroupCollectives()


def collectives_of(strategy: Strategy | None) -> SupportsCollectives:
    """The strategy itself when it provides collectives, else accel_ops' process-group ones."""
    if isinstance(strategy, SupportsCollectives):
        return strategy
    return _DEFAULT
