"""Keyword-argument handlers: small dataclasses given to ``Accelerator(kwargs_handlers=[...])``.

Each customises one object the Accelerator creates (the DDP wrapper, the gradient scaler, the
process group, autocast, the profiler). ``to_kwargs()`` returns only the values that differ from
the defaults, so the wrapped object keeps its own defaults for everything else.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, Literal

from accel_core.configuration import DDPCommunicationHookType


class KwargsHandler:
    """Mixin for the handler dataclasses: ``to_dict()`` and ``to_kwargs()``."""

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of every field."""
        return copy.deepcopy({f.name: getattr(self, f.name) for f in fields(self)})  # type: ignore[arg-type]

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the class default, as keyword arguments."""
        defaults = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if defaults.get(k) != v}


@dataclass
class AutocastKwargs(KwargsHandler):
    """Arguments of ``torch.autocast`` used by ``Accelerator.autocast()`` and prepared models."""

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments of ``torch.nn.parallel.DistributedDataParallel``, plus a communication hook.

    ``comm_hook`` compresses or approximates the gradients exchanged (fp16, bf16, PowerSGD);
    ``comm_wrapper`` (fp16 or bf16) compresses what PowerSGD sends; ``comm_state_option`` holds
    the PowerSGD state's arguments (``matrix_approximation_rank``, ``start_powerSGD_iter``...).
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = field(default_factory=dict)

    _HOOK_FIELDS = ("comm_hook", "comm_wrapper", "comm_state_option")

    def __post_init__(self) -> None:
        self.comm_hook = DDPCommunicationHookType.parse(self.comm_hook, "comm_hook")  # type: ignore[assignment]
        self.comm_wrapper = DDPCommunicationHookType.parse(self.comm_wrapper, "comm_wrapper")  # type: ignore[assignment]
        if self.comm_wrapper not in (
            DDPCommunicationHookType.NO,
            DDPCommunicationHookType.FP16,
            DDPCommunicationHookType.BF16,
        ):
            raise ValueError(
                f"comm_wrapper={self.comm_wrapper.value!r} is not valid; a wrapper compresses what "
                "another hook sends: choose 'no', 'fp16' or 'bf16'."
            )

    def to_dict(self) -> dict[str, Any]:
        """The DDP constructor arguments (the hook fields are left out)."""
        return {k: v for k, v in super().to_dict().items() if k not in self._HOOK_FIELDS}


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Arguments of ``torch.amp.GradScaler``, used with ``mixed_precision="fp16"``."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Arguments of ``torch.distributed.init_process_group``.

    ``timeout`` is how long collectives wait for the other processes before failing; ``None``
    keeps torch's default. ``backend=None`` lets the process state choose (gloo on CPU, nccl on
    CUDA).
    """

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None and not isinstance(self.timeout, timedelta):
            raise TypeError(
                f"InitProcessGroupKwargs(timeout={self.timeout!r}) must be a datetime.timedelta, "
                "for example timedelta(seconds=600)."
            )


# The activity names ``ProfileKwargs(activities=...)`` takes, as Accelerate types them.
ProfilerActivity = Literal["cpu", "xpu", "mtia", "cuda", "hpu"]


@dataclass
class ProfileKwargs(KwargsHandler):
    """How ``Accelerator.profile()`` configures ``torch.profiler.profile``.

    Args:
        activities: ``"cpu"``, ``"cuda"`` (and ``"xpu"``, ``"mtia"``); ``None`` profiles the CPU
            and, when present, CUDA.
        schedule_option: arguments of ``torch.profiler.schedule`` (``wait``, ``warmup``,
            ``active``, ``repeat``, ``skip_first``).
        on_trace_ready: called with the profiler when a trace is ready.
        record_shapes, profile_memory, with_stack, with_flops, with_modules: as in torch.profiler.
        output_trace_dir: write a Chrome trace ``trace_rank<i>.json`` per process there.
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable[..., Any] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None


_HANDLER_TYPES = (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)


def collect_handlers(handlers: Any) -> dict[type, KwargsHandler]:
    """Index ``Accelerator(kwargs_handlers=[...])`` by type; one handler per type.

    A handler of a feature accel does not run (the FP8 recipes) raises its
    :class:`~accel_core.out_of_scope.OutOfScopeError`.
    """
    from accel_core.out_of_scope import OutOfScopeKwargsHandler

    found: dict[type, KwargsHandler] = {}
    for handler in handlers or ():
        if isinstance(handler, OutOfScopeKwargsHandler):
            raise handler.unsupported_error()
        kind = next((t for t in _HANDLER_TYPES if isinstance(handler, t)), None)
        if kind is None:
            if isinstance(handler, KwargsHandler):  # a handler a strategy understands
                kind = type(handler)
            else:
                names = ", ".join(t.__name__ for t in _HANDLER_TYPES)
                raise TypeError(
                    f"kwargs_handlers got {handler!r} of type {type(handler).__name__}; expected "
                    f"instances of {names}."
                )
        if kind in found:
            raise ValueError(
                f"kwargs_handlers holds two {kind.__name__} objects; pass one per type."
            )
        found[kind] = handler
    return found
