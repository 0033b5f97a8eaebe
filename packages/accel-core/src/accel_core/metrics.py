"""``gather_for_metrics``: every process's predictions, once each, in dataset order.

Sharded evaluation repeats samples at the end so every process gets a full last batch (with
``even_batches``); gathering then returns duplicates. On the last batch of the data loader the
gathered result is cut to ``GradientState.remainder`` samples (``accel_ops.drop_duplicated_tail``).
Without ``even_batches`` the last batches differ in length across processes; they are padded for
the gather and the padding removed again. On the last batch the ranks exchange their lengths with
the rest of each tensor's shape and its dtype, so tensors that differ beyond dim 0 are an error on
every rank (gloo would otherwise return garbage or abort). Earlier batches go straight to
``gather``, which compares inputs only in debug mode (see ``accel_ops.collectives``).

When processes share batches (the ranks of one tensor-parallel group), only the data-parallel
ranks are gathered (the strategy's ``data_parallel_group``); with one data-parallel rank there is
nothing to gather and each process keeps its own results.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import accel_ops

if TYPE_CHECKING:
    from accel_core.accelerator import Accelerator

logger = logging.getLogger(__name__)


def _one_process_gather_object(obj: object) -> list[object]:
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


def _only_tensors(data: Any) -> bool:
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, dict):
        return all(_only_tensors(v) for v in data.values())
    if isinstance(data, (list, tuple)):
        return all(_only_tensors(v) for v in data)
    return False


def _first_dims(data: Any) -> list[int]:
    if isinstance(data, torch.Tensor):
        return [data.shape[0] if data.ndim else 1]
    values = data.values() if isinstance(data, dict) else data
    return [n for value in values for n in _first_dims(value)]


def _leaf_specs(data: Any) -> list[str]:
    """Each tensor's shape beyond dim 0 and its dtype, e.g. ``"(*, 10) float32"``."""
    if isinstance(data, torch.Tensor):
        rest = ", ".join(str(size) for size in data.shape[1:])
        shape = f"(*, {rest})" if rest else "(*)"
        return [f"{shape} {str(data.dtype).replace('torch.', '')}"]
    values = data.values() if isinstance(data, dict) else data
    return [spec for value in values for spec in _leaf_specs(value)]


def _check_same_specs(everyone: list[list[Any]]) -> None:
    """Raise on every rank when the ranks' tensors differ beyond dim 0 (they all see the same)."""
    from accel_ops import DistributedOperationException

    specs = [rank_specs for _, rank_specs in everyone]
    if all(rank_specs == specs[0] for rank_specs in specs):
        return
    per_rank = "\n".join(f"  rank {r}: {'; '.join(s) or '(nothing)'}" for r, s in enumerate(specs))
    raise DistributedOperationException(
        "gather_for_metrics: the ranks passed tensors that differ beyond the first dimension (or "
        "in dtype or structure), so they can't be gathered. Only the batch dimension may differ; "
        "pad the others with accelerator.pad_across_processes(..., dim=...) first. "
        f"Found:\n{per_rank}"
    )


def _gather_uneven(data: Any, lengths: list[list[int]], gather: Callable[[Any], Any]) -> Any:
    """Gather tensors whose first dimension differs across processes, without padding rows."""
    from accel_ops import pad_across_processes, recursively_apply

    padded = gather(pad_across_processes(data, dim=0))
    counter = iter(range(len(lengths[0])))

    def unpad(tensor: torch.Tensor) -> torch.Tensor:
        leaf = next(counter)
        rows = tensor.shape[0] // len(lengths)
        parts = [tensor[r * rows : r * rows + lengths[r][leaf]] for r in range(len(lengths))]
        return torch.cat(parts, dim=0)

    return recursively_apply(unpad, padded)


def gather_for_metrics(accelerator: Accelerator, input_data: Any, use_gather_object: bool) -> Any:
    """See :meth:`accel_core.Accelerator.gather_for_metrics`."""
    from accel_core.collectives import collectives_of
    from accel_ops import drop_duplicated_tail

    strategy = accelerator.strategy
    collectives = collectives_of(strategy)
    gather, gather_object = collectives.gather, collectives.gather_object
    state = accelerator.gradient_state
    use_gather_object = use_gather_object or not _only_tensors(input_data)
    at_end = state.end_of_dataloader
    shards = strategy.distributed_sampler_kwargs["num_replicas"]
    group = strategy.data_parallel_group
    if shards == 1 and accelerator.use_distributed:
        # every process read the same batches (tensor parallelism alone): nothing to gather,
        # each process's results come back as one process's would
        gather, gather_object = (lambda data: data), _one_process_gather_object
    elif group is not None:  # only the data-parallel ranks read different batches
        gather = functools.partial(accel_ops.gather, group=group)
        gather_object = functools.partial(accel_ops.gather_object, group=group)
    if use_gather_object:
        data = gather_object(input_data)
    elif at_end and accelerator.use_distributed and shards > 1:
        # Only the last batch can differ in length between processes: check it there, with
        # the rest of each tensor's shape and its dtype (the exchange happens anyway).
        everyone = gather_object([(_first_dims(input_data), _leaf_specs(input_data))])
        _check_same_specs(everyone)
        lengths = [rank_lengths for rank_lengths, _ in everyone]
        uneven = any(rank_lengths != lengths[0] for rank_lengths in lengths)
        data = _gather_uneven(input_data, lengths, gather) if uneven else gather(input_data)
    else:
        data = gather(input_data)
    if not at_end:
        return data
    remainder = state.remainder
    if remainder < 0:
        logger.info(
            "The dataset of this loader has no length: returning every gathered sample; drop "
            "duplicated ones yourself."
        )
        return data
    return drop_duplicated_tail(data, remainder)
