"""``PipelineParallelConfig``: how ``prepare`` splits a model into pipeline stages
(``ParallelismConfig``'s ``pp_handler``) and which schedule runs them.

Pipeline parallelism runs under the ``fsdp`` strategy (:mod:`accel_backends.fsdp.pipelining`).
Torch-free: ``accel launch`` reads the configuration module without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: ``split_fn(model, stage_index, num_stages) -> stage``: the module of stage ``stage_index``
#: (0-based) of ``num_stages``, built from ``model``'s own sub-modules (the same parameter
#: objects, not copies). Its forward takes what the previous stage returned (the first stage:
#: the micro-batch's inputs, as ``forward_backward`` got them) and returns one tensor (or a
#: tuple of tensors) for the next stage; the last stage returns what ``loss_fn`` receives.
SplitFn = Callable[["torch.nn.Module", int, int], "torch.nn.Module"]

#: The schedules accel runs, by the names torch gives their classes (``ScheduleGPipe``,
#: ``Schedule1F1B``).
SCHEDULES: tuple[str, ...] = ("GPipe", "1F1B")


@dataclass
class PipelineParallelConfig:
    """How ``prepare`` splits a model into stages over the mesh's ``pp`` dimension.

    Args:
        split_fn: ``split_fn(model, stage_index, num_stages)`` returns the stage's module, made of
            ``model``'s own sub-modules (see :data:`SplitFn`). None: the model must be a
            transformers causal LM (``model.model.layers``, ``embed_tokens``, ``norm``,
            ``lm_head``), split evenly by its decoder layers, embeddings on the first stage,
            final norm and ``lm_head`` on the last.
        schedule: ``"1F1B"`` (the default: one forward, one backward, at most ``pp_size``
            micro-batches' activations held) or ``"GPipe"`` (every forward, then every backward).
        microbatches: how many micro-batches each batch is split into along its first dimension
            (the batch size must be a multiple of it). None: ``pp_size``, the fewest that keep
            every stage busy at some point.

    Raises ``ValueError`` for an unknown schedule or fewer than one micro-batch, ``TypeError``
    for a ``split_fn`` that is not callable.
    """

    split_fn: SplitFn | None = None
    schedule: str = "1F1B"
    microbatches: int | None = None

    def __post_init__(self) -> None:
        if self.split_fn is not None and not callable(self.split_fn):
            raise TypeError(
                "split_fn must be a callable split_fn(model, stage_index, num_stages) returning "
                f"the stage's module, got {type(self.split_fn).__name__}"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"schedule={self.schedule!r} is not a pipeline schedule accel runs; choose one "
                f"of {', '.join(map(repr, SCHEDULES))}"
            )
        if self.microbatches is not None and self.microbatches < 1:
            raise ValueError(f"microbatches must be at least 1, got {self.microbatches}")
