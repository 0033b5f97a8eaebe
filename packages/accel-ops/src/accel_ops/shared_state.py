"""The dictionary type behind a shared ("Borg") state, as Accelerate's ``accelerate.state`` has it.

Every instance of a Borg class shares one dict of attributes. ``SharedDict`` is ``dict``, or,
where torch_xla is installed, :class:`ThreadLocalSharedDict`: PJRT runs one thread per TPU core
on TPU v2/v3, and each thread needs its own state. (accel's ``PartialState`` keeps a plain dict.)
"""

from __future__ import annotations

import threading
from typing import Any

from accel_ops.accelerators import is_torch_xla_available


class ThreadLocalSharedDict(threading.local):
    """A descriptor holding a dict shared by the instances of a class within one thread.

    Use it as a class attribute: ``_shared_state = ThreadLocalSharedDict()``. Reading it from the
    class or from an instance gives the current thread's dict; assigning through an instance
    replaces that dict. Assigning to the class attribute replaces the descriptor itself, so clear
    the dict in place (``_shared_state.clear()``) instead. Each thread starts with an empty dict.
    """

    def __init__(self, thread_local: bool = False) -> None:
        self._storage: dict[str, Any] = {}

    def __get__(self, obj: object, objtype: type | None = None) -> dict[str, Any]:
        return self._storage

    def __set__(self, obj: object, value: dict[str, Any]) -> None:
        self._storage = value


SharedDict: type = ThreadLocalSharedDict if is_torch_xla_available() else dict
"""``dict``, or :class:`ThreadLocalSharedDict` where torch_xla is installed."""
