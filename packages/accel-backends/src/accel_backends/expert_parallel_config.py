"""``ExpertParallelConfig``: which modules of a mixture-of-experts model ``prepare`` splits over
the mesh's ``ep`` dimension (``ParallelismConfig``'s ``ep_handler``).

Expert parallelism runs under the ``fsdp`` strategy (:mod:`accel_backends.expert_split`,
:mod:`accel_backends.fsdp.expert_parallel`). Torch-free: ``accel launch`` reads the
configuration module without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: ``find_experts(model) -> [(qualified_name, module), ...]``: the expert modules of ``model``.
FindExperts = Callable[["torch.nn.Module"], Iterable[tuple[str, "torch.nn.Module"]]]


@dataclass
class ExpertParallelConfig:
    """Which modules hold a model's experts.

    An experts module follows transformers' contract (``MixtralExperts``, ``Qwen3MoeExperts``,
    ...): every parameter of its own stacks the experts along dimension 0 (shape
    ``[num_experts, ...]``), it has a ``num_experts`` attribute, and its forward is
    ``forward(hidden_states, top_k_index, top_k_weights) -> output``, with ``hidden_states`` of
    shape ``[tokens, hidden]``, ``top_k_index``/``top_k_weights`` ``[tokens, k]`` (the router's
    choices and their weights), and ``output[t] = sum_j top_k_weights[t, j] *
    expert[top_k_index[t, j]](hidden_states[t])``. The router stays outside it (replicated).

    Args:
        experts: a glob over qualified module names (``"layers.*.moe.experts"``, matched with
            :func:`fnmatch.fnmatchcase`), or ``find_experts(model)`` returning ``(name, module)``
            pairs. None (the default): every module with an integer ``num_experts`` attribute
            whose own parameters all have ``num_experts`` rows, which finds transformers'
            experts modules.
    """

    experts: str | FindExperts | None = None

    def __post_init__(self) -> None:
        if self.experts is not None and not (
            isinstance(self.experts, str) or callable(self.experts)
        ):
            raise TypeError(
                "experts must be a glob over module names (str) or a callable "
                f"find_experts(model) -> [(name, module)], got {type(self.experts).__name__}"
            )
