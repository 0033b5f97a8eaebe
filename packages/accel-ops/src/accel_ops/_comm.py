"""Internal: which processes a collective talks to, debug-mode checks, and error wrapping.

Every collective asks :func:`resolve` first. ``None`` means one process: nothing to communicate.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from accel_ops import inflight
from accel_ops.errors import CollectiveTimeoutError, DistributedOperationException
from accel_ops.state import PartialState
from accel_ops.tree import LeafTypeError, _walk

_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Comm:
    """The group a collective runs on, with this rank's place in it (plain slots: cheap to make)."""

    __slots__ = ("debug", "group", "rank", "timeout_seconds", "world_size")

    def __init__(
        self, group: Any, world_size: int, rank: int, debug: bool, timeout_seconds: float | None
    ) -> None:
        self.group = group
        self.world_size = world_size
        self.rank = rank
        self.debug = debug
        self.timeout_seconds = timeout_seconds


def resolve(group: Any = None) -> Comm | None:
    """The communicator for ``group`` (default: the current PartialState); None for one process."""
    shared = PartialState._shared_state
    if group is not None:
        world_size = dist.get_world_size(group)
        if world_size == 1:
            return None
        return Comm(group, world_size, dist.get_rank(group), bool(shared.get("debug", False)), None)
    if shared:
        world_size = shared["num_processes"]
        if world_size <= 1:
            return None
        timeout = shared.get("timeout")
        return Comm(
            None,
            world_size,
            shared["process_index"],
            bool(shared["debug"]),
            timeout.total_seconds() if timeout is not None else None,
        )
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return Comm(None, dist.get_world_size(), dist.get_rank(), False, None)
    return None


def failure(operation: str, comm: Comm, error: BaseException) -> DistributedOperationException:
    """Our error for a torch collective that raised, naming the operation and this rank.

    The timeout is mentioned only when the collective timed out: then it is the reason.
    """
    text = str(error)
    where = f"{operation} failed on rank {comm.rank} of {comm.world_size}"
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        limit = f" in {comm.timeout_seconds:g} s" if comm.timeout_seconds else " in time"
        return CollectiveTimeoutError(
            f"{where}: the collective did not complete{limit}. Usually another rank never "
            f"reached this {operation} (it took a different branch, or crashed; see its log). "
            f"Raise ACCEL_PROCESS_GROUP_TIMEOUT or PartialState(timeout=...) only if that rank "
            f"is merely slow. torch said: {text}"
        )
    if "connection reset" in lowered or "connection closed" in lowered:
        return DistributedOperationException(
            f"{where}: another rank closed its connection (it exited or crashed; see its log). "
            f"torch said: {text}"
        )
    return DistributedOperationException(f"{where}: {text}")


def call(
    operation: str,
    comm: Comm,
    function: Callable[..., Any],
    *args: Any,
    inputs: Any = None,
    **kwargs: Any,
) -> Any:
    """Run a torch.distributed call, recorded as in flight, turning its failure into our error.

    ``inputs`` (what this rank contributes) is described in the hang report if the call lasts.
    Autograd never sees the call: collectives are not differentiable, and gloo's in-place writes
    into views of tensors that require grad would be refused.
    """
    token = inflight.begin(operation, inputs)
    try:
        with torch.no_grad():
            return function(*args, **kwargs)
    except RuntimeError as error:  # DistBackendError and gloo's timeouts are RuntimeErrors
        ours = failure(operation, comm, error)
        inflight.failed(ours)
        raise ours from error
    finally:
        inflight.end(token)


def describe(data: Any, loose_dim: int | None = None) -> list[str]:
    """One line per leaf: its path, shape and dtype (``*`` for ``loose_dim``, allowed to differ)."""
    lines: list[str] = []

    def note(tensor: torch.Tensor) -> torch.Tensor:
        shape = [str(size) for size in tensor.shape]
        if loose_dim is not None and -len(shape) <= loose_dim < len(shape):
            shape[loose_dim] = "*"
        lines.append(f"shape ({', '.join(shape)}) {str(tensor.dtype).replace('torch.', '')}")
        return tensor

    def other(leaf: object) -> bool:
        if isinstance(leaf, torch.Tensor):
            return True
        if not (dataclasses.is_dataclass(leaf) and not isinstance(leaf, type)):
            lines.append(f"not a tensor: {type(leaf).__qualname__}")
        return False

    try:
        _walk(note, data, (), {}, other, False)
    except LeafTypeError:  # pragma: no cover - _walk does not raise without error_on_other_type
        pass
    return lines


def verify(operation: str, comm: Comm, data: Any, loose_dim: int | None = None) -> None:
    """Compare the collective, shapes and dtypes across ranks; raise on every rank if they differ.

    Runs before every collective in debug mode, and in ``pad_across_processes`` when the
    fingerprints that travel with the sizes differ, to say how.
    """
    mine = (operation, describe(data, loose_dim))
    everyone: list[Any] = [None] * comm.world_size
    call(operation, comm, dist.all_gather_object, everyone, mine, group=comm.group)
    if all(theirs == everyone[0] for theirs in everyone):
        return
    if any(name != operation for name, _ in everyone):
        per_rank = "\n".join(
            f"  rank {rank}: {name} of {'; '.join(lines) or '(nothing)'}"
            for rank, (name, lines) in enumerate(everyone)
        )
        raise DistributedOperationException(
            f"{operation}: the ranks called different collectives at the same point, so none of "
            "them can run (they would hang or mix data). Every rank must call the same "
            f"collectives in the same order. The ranks called:\n{per_rank}"
        )
    per_rank = "\n".join(
        f"  rank {rank}: {'; '.join(lines) or '(nothing)'}"
        for rank, (_, lines) in enumerate(everyone)
    )
    hint = (
        " Tensors whose size differs along one dimension can be made equal with "
        "pad_across_processes first."
        if operation != "pad_across_processes"
        else ""
    )
    raise DistributedOperationException(
        f"{operation}: the ranks passed different shapes or dtypes, so the collective can't run "
        f"(it would hang or mix data). Every rank must pass the same structure of tensors with the "
        f"same shapes and dtypes.{hint} Found:\n{per_rank}"
    )


def fingerprint(operation: str, lines: list[str]) -> list[int]:
    """``[number of tensors, CRC-32 of the operation and their descriptions]``.

    Equal on ranks that call the same collective with equal inputs.
    """
    return [len(lines), zlib.crc32("\n".join([operation, *lines]).encode())]
