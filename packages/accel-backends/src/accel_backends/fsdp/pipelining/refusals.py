"""What pipeline parallelism does not run with, refused at ``prepare`` with the reason, before
the model changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accel_backends.fsdp.common import FSDPStrategy


def refuse_unsupported_pipeline(strategy: FSDPStrategy) -> None:
    """Raise ``ValueError`` for what accel has not built or run under ``pp_size > 1``:
    tensor parallelism beside it, loading from process 0 (``cpu_ram_efficient_loading``: the
    stages would need process 0's weights of other stages) and an fp16 gradient scaler (the
    schedule backpropagates each micro-batch itself, unscaled)."""
    size = strategy.pp_mesh.size() if strategy.pp_mesh is not None else 1
    if strategy.tp_mesh is not None:
        raise ValueError(
            f"pipeline parallelism (pp_size={size}) with tensor parallelism (tp_size="
            f"{strategy.tp_mesh.size()}) is not built in accel: use pp_size with dp_shard_size "
            "and dp_replicate_size, or tp_size without pp_size"
        )
    if strategy.plugin.cpu_ram_efficient_loading:
        raise ValueError(
            f"cpu_ram_efficient_loading (fsdp_cpu_ram_efficient_loading) can't be used with "
            f"pipeline parallelism (pp_size={size}): each stage keeps its own part of the "
            "model, which process 0 does not hold; turn it off"
        )
    if strategy.precision.scaler is not None:
        raise ValueError(
            f"mixed_precision='fp16' with a gradient scaler can't be used with pipeline "
            f"parallelism (pp_size={size}): the schedule backpropagates each micro-batch's "
            "loss itself, unscaled; use mixed_precision='bf16' or 'no'"
        )
