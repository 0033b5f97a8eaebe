"""Reading the next offloaded module's weights in a background thread while this one computes.

A ``Prefetcher`` is shared by the offloading hooks of one dispatched model. When hook H runs, it
first takes the weights prefetched for it (or reads them itself), then asks for the weights of
the module expected next: the one that ran after H last time, or, before that is known, the next
offloaded module in definition order. The background task asks the kernel to start reading that
module and the one after it from disk (``posix_fadvise(WILLNEED)``, no memory of ours held),
faults in the pages of the memory-mapped tensors of the first, and on a GPU copies them there on
a side stream. One task is in flight at a time, so at most one extra module's weights are held.
The same bytes are read either way, so outputs are bit-identical with and without prefetching.

The thread costs more than it saves on CPU-only runs with a warm page cache (it competes with the
compute thread for the interpreter); :class:`~accel_bigmodel.read_ahead.ReadAhead` only gives
the kernel read-ahead hints. Neither is on by default (see :func:`prefetch_mode`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from accel_bigmodel.align_hooks import AlignDevicesHook


PrefetchMode = Literal["thread", "advise"]
PREFETCH_VARIABLE = "ACCEL_OFFLOAD_PREFETCH"
_MODES: dict[str, PrefetchMode | None] = {
    "thread": "thread", "1": "thread", "true": "thread", "yes": "thread", "on": "thread",
    "advise": "advise",
    "0": None, "false": None, "no": None, "off": None,
}  # fmt: skip


def prefetch_mode(prefetch: bool | None) -> PrefetchMode | None:
    """What ``dispatch_model(prefetch=...)`` does: ``True`` reads ahead in a background thread,
    ``False`` not at all; ``None`` (the default, and what transformers passes) follows
    ``ACCEL_OFFLOAD_PREFETCH`` (``thread``/``1``, ``advise``, ``0``), else reads nothing ahead.
    Measured on CPU (benchmarks/RESULTS.md), neither way of reading ahead was faster than none,
    with a warm page cache or a cold one, and the thread was slower: so none is the default.

    Raises:
        ValueError: ``ACCEL_OFFLOAD_PREFETCH`` holds another value.
    """
    if prefetch is not None:
        return "thread" if prefetch else None
    value = os.environ.get(PREFETCH_VARIABLE, "").strip().lower()
    if not value:
        return None
    if value not in _MODES:
        raise ValueError(
            f"{PREFETCH_VARIABLE}={value!r} is not one of thread (or 1), advise, 0: "
            "thread reads the next offloaded block in a background thread, advise only asks the "
            "kernel to read it ahead, 0 does neither."
        )
    return _MODES[value]


class Prefetcher:
    """Background reads for a list of offloading hooks given in definition order."""

    threaded = True

    def __init__(self, hooks: list[AlignDevicesHook]) -> None:
        self.hooks = list(hooks)
        self._position = {id(h): i for i, h in enumerate(self.hooks)}
        self._successor: dict[int, AlignDevicesHook] = {}
        self._last: AlignDevicesHook | None = None
        self._pending: tuple[AlignDevicesHook, Future] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accel-prefetch")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def take(self, hook: AlignDevicesHook) -> dict[str, torch.Tensor] | None:
        """The weights prefetched for ``hook``, or None if another module's were prefetched."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            self.misses += 1
            return None
        if pending[0] is not hook:
            self.misses += 1
            pending[1].cancel()
            return None
        self.hits += 1
        return pending[1].result()

    def after(self, hook: AlignDevicesHook) -> None:
        """Record that ``hook`` ran and start reading the weights of the module expected next."""
        if self._last is not None and self._last is not hook:
            self._successor[id(self._last)] = hook
        self._last = hook
        following = self._successor.get(id(hook))
        if following is None:
            position = self._position.get(id(hook))
            if position is None or len(self.hooks) < 2:
                return
            following = self.hooks[(position + 1) % len(self.hooks)]
        if following is hook:
            return
        future = self._executor.submit(_load, following, self._expected_after(following))
        with self._lock:
            self._pending = (following, future)

    def _expected_after(self, hook: AlignDevicesHook) -> AlignDevicesHook | None:
        following = self._successor.get(id(hook))
        if following is None and id(hook) in self._position:
            following = self.hooks[(self._position[id(hook)] + 1) % len(self.hooks)]
        return following

    def close(self) -> None:
        """Stop the background thread (pending reads are dropped)."""
        with self._lock:
            self._pending = None
        self._executor.shutdown(wait=True, cancel_futures=True)


def _load(hook: AlignDevicesHook, then: AlignDevicesHook | None) -> dict[str, torch.Tensor]:
    hook.advise_weights()  # start every read of the module at once, then wait for them in order
    if then is not None:
        then.advise_weights()  # and keep the disk busy with the module after it (no memory held)
    values = hook.load_weights()
    for value in values.values():  # fault memory-mapped pages in now, off the compute thread
        if value.device.type == "cpu" and value.numel() > 0 and value.is_contiguous():
            value.reshape(-1).view(torch.uint8)[::4096].max()
    device = hook.execution_device
    if device is None or torch.device(device).type != "cuda":
        return values
    stream = torch.cuda.Stream(device=device)
    with torch.cuda.stream(stream):
        moved = {name: value.to(device, non_blocking=True) for name, value in values.items()}
    stream.synchronize()
    return moved
