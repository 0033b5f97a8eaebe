"""Keeping the disk busy ahead of an offloaded model: read-ahead hints over a window of bytes.

An offloaded model runs its offloaded modules in the same order on every forward (every
generated token). ``ReadAhead`` follows that order (the hooks' definition order) and, each time
a module runs, asks the kernel to start reading the modules after it (``advise_weights``:
``MADV_WILLNEED``, skipped for a tensor whose first page is already in memory) until
:data:`WINDOW_BYTES` of weights ahead of the running module have been asked for. Each module is
asked for once per pass, so with a warm page cache the cost is one ``mincore`` call per tensor
per pass; with a cold one, reads of the next modules queue up while the current one computes.
Nothing is held: the pages go to the page cache, and the hook maps them when its module runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from accel_bigmodel.align_hooks import AlignDevicesHook

WINDOW_BYTES = 128 << 20
"""Bytes of offloaded weights asked for ahead of the running module (at most one full pass)."""


class ReadAhead:
    """Read-ahead hints for a list of offloading hooks given in definition order.

    It has the prefetcher's interface (``take``, ``after``, ``close``, ``hits``, ``threaded``),
    so a hook uses either the same way; ``take`` never has weights to give.
    """

    threaded = False
    hits = 0

    def __init__(self, hooks: list[AlignDevicesHook], window_bytes: int = WINDOW_BYTES) -> None:
        self.hooks = list(hooks)
        self.window_bytes = window_bytes
        self._position = {id(h): i for i, h in enumerate(self.hooks)}
        self._bytes = [hook.offloaded_bytes() for hook in self.hooks]
        self._pass = 0  # how many times the modules wrapped around (one pass per forward)
        self._last = -1  # the position of the module that ran last
        self._advised = -1  # the furthest position asked for, counted over passes
        self._ahead = 0  # bytes asked for after the running module

    def take(self, hook: AlignDevicesHook) -> dict[str, torch.Tensor] | None:
        """Nothing is read here: the hook reads its weights itself."""
        return None

    def after(self, hook: AlignDevicesHook) -> None:
        """``hook``'s module is running: ask for the modules after it, up to the window."""
        position = self._position.get(id(hook))
        if position is None:
            return
        count = len(self.hooks)
        if position <= self._last:
            self._pass += 1
        self._last = position
        current = self._pass * count + position
        if current >= self._advised:
            self._advised, self._ahead = current, 0
        else:
            self._ahead -= self._bytes[position]
        while self._ahead < self.window_bytes and self._advised < current + count - 1:
            self._advised += 1
            index = self._advised % count
            self.hooks[index].advise_weights()
            self._ahead += self._bytes[index]

    def close(self) -> None:
        """Nothing to stop (no thread)."""
