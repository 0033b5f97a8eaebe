"""Expert parallelism under the ``fsdp`` strategy: what ``prepare`` does with ``ep_size > 1``.

The ``ep`` dimension, its validation and its device mesh are built
(:mod:`accel_backends.expert_parallel_mesh`); splitting a model's experts over it is not, yet:
``prepare`` refuses ``ParallelismConfig(ep_size > 1)`` with what works instead. A transformers
mixture-of-experts model that transformers splits itself
(``from_pretrained(..., distributed_config=DistributedConfig(ep_size=N, fsdp_size=M))``) is
prepared as it is, each rank's experts kept: leave ``ep_size`` at 1 there.
"""

from __future__ import annotations

from accel_core.out_of_scope import OutOfScopeError


def refuse_unbuilt_expert_parallel(config: object) -> None:
    """Raise ``OutOfScopeError`` when ``config`` asks for ``ep_size > 1``: accel does not split
    experts itself yet. Called before the model is changed."""
    size = getattr(config, "ep_size", None) or 1
    if size > 1:
        raise OutOfScopeError(
            f"ParallelismConfig(ep_size={size}): accel builds the expert-parallel device mesh "
            "(accelerator.torch_device_mesh['ep']) but does not split a model's experts over it "
            "yet. For a transformers mixture-of-experts model, let transformers split it: "
            f"from_pretrained(..., distributed_config=DistributedConfig(ep_size={size}, "
            "fsdp_size=...)) with ParallelismConfig(dp_shard_size=...) and ep_size left at 1; "
            "prepare() keeps each rank's experts."
        )
