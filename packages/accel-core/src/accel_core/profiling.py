"""``Accelerator.profile()``: torch.profiler configured from ``ProfileKwargs``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from accel_core.kwargs_handlers import ProfileKwargs

_ACTIVITIES = {
    "cpu": "CPU",
    "cuda": "CUDA",
    "xpu": "XPU",
    "mtia": "MTIA",
}


def _activities(names: list[str] | None) -> list[Any]:
    from torch.profiler import ProfilerActivity

    if names is None:
        names = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    chosen = []
    for name in names:
        member = _ACTIVITIES.get(str(name).lower())
        if member is None:
            raise ValueError(
                f"ProfileKwargs(activities=[..., {name!r}, ...]): unknown activity; choose from "
                f"{', '.join(map(repr, _ACTIVITIES))}."
            )
        chosen.append(getattr(ProfilerActivity, member))
    return chosen


def build_profiler(handler: ProfileKwargs) -> torch.profiler.profile:
    """A ``torch.profiler.profile`` configured by ``handler`` (not yet started)."""
    schedule = (
        torch.profiler.schedule(**handler.schedule_option) if handler.schedule_option else None
    )
    return torch.profiler.profile(
        activities=_activities(handler.activities),
        schedule=schedule,
        on_trace_ready=handler.on_trace_ready,
        record_shapes=handler.record_shapes,
        profile_memory=handler.profile_memory,
        with_stack=handler.with_stack,
        with_flops=handler.with_flops,
        with_modules=handler.with_modules,
    )


@contextlib.contextmanager
def profile(handler: ProfileKwargs | None, process_index: int) -> Iterator[torch.profiler.profile]:
    """Run the block under the profiler; write ``profile_<rank>.json`` to ``output_trace_dir``."""
    handler = handler or ProfileKwargs()
    with build_profiler(handler) as profiler:
        yield profiler
    if handler.output_trace_dir:
        os.makedirs(handler.output_trace_dir, exist_ok=True)
        profiler.export_chrome_trace(
            os.path.join(handler.output_trace_dir, f"profile_{process_index}.json")
        )
