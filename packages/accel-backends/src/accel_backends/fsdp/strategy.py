"""The ``fsdp`` strategy: :class:`FSDP2Strategy` (``torch.distributed.fsdp.fully_shard``) and
:class:`FSDP1Strategy` (``FullyShardedDataParallel``), sharded for real, on the parts they share
(:class:`FSDPStrategy`: the mesh, the optimizers' owners; its ``checkpoint_io``, state dicts and
checkpoints). One module per concern: :mod:`~accel_backends.fsdp.common` (what both versions
share), :mod:`~accel_backends.fsdp.fsdp2` (FSDP2 with tensor parallelism),
:mod:`~accel_backends.fsdp.fsdp1`, :mod:`~accel_backends.fsdp.checkpoint_io` (checkpointing) and
:mod:`~accel_backends.fsdp.accumulation` (gradients inside an accumulation cycle); this module
names them, as before, and holds the factory.

:func:`create_fsdp_strategy` (the factory the engine's description names) builds the plugin
(from ``plugin=``, the options or the launch environment) and returns the class of its
``fsdp_version``; ``FSDPStrategy(...)`` does the same. Each difference between the two versions
is a method one of them overrides.

Every process holds one shard of each parameter, gradient and optimizer state (a ``DTensor``
over a one-dimensional mesh of every process); forward and backward all-gather the parameters of
one unit at a time and reduce-scatter its gradients. Runs wherever the process group has
all-gather and reduce-scatter: NCCL on GPUs, gloo on CPUs (torch >= 2.6). With a
``ParallelismConfig`` of ``dp_shard_size > 1`` it shards over the configuration's mesh instead
(HSDP when ``dp_replicate_size > 1`` too: each shard group holds one copy, gradients are also
all-reduced across copies), which becomes ``accelerator.torch_device_mesh``
(:mod:`accel_backends.fsdp.mesh`). With ``tp_size > 1`` too (FSDP2 only) each model is first
split over the mesh's ``tp`` dimension (tensor parallelism; :mod:`accel_backends.fsdp.
tensor_parallel`), then sharded over the data-parallel dimensions; ``tp_size`` equal to the
number of processes splits without sharding.

Selected by ``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))``, by
``ACCEL_STRATEGY=fsdp`` (``accel launch``; ``ACCEL_STRATEGY_CONFIG`` holds the ``fsdp_config``
keys), by ``Accelerator(strategy="fsdp")``, or by a ``ParallelismConfig`` with ``dp_shard_size >
1`` when nothing else names a strategy. Without a plugin the strategy builds one and defaults to
FSDP version 2 (Accelerate's plugin defaults to 1).

FSDP version 1 (``fsdp_version=1``) wraps the model in ``FullyShardedDataParallel`` with the
plugin's sharding strategy, policy and options (:mod:`accel_backends.fsdp.v1_wrapping`);
``prepare`` returns the wrapper, as Accelerate does, and ``unwrap_model`` the model inside. Its
optimizer is re-pointed at the shards: at the parameters' views with ``use_orig_params``
(parameter groups kept), else at the flat parameters (one group, as in Accelerate). Clipping and
``no_sync`` go through the wrapper; a checkpoint inside an accumulation cycle warns that the
cycle's gradients are not saved (as under DeepSpeed). Checkpoints are the same files as FSDP2's.

``prepare`` shards as :func:`accel_backends.fsdp.sharding.shard_model` says: activation
checkpointing of the policy's layers (parameter names then show ``_checkpoint_wrapped_module``,
state dicts and checkpoints don't), fp32 master weights under mixed precision, loading from
process 0 with ``cpu_ram_efficient_loading``; CPU offload on a CPU run changes nothing. One
process works too (the strategy forms a group of one).

Checkpoints (``save_state``): ``SHARDED_STATE_DICT`` (FSDP2's default) writes each process's
shards through torch.distributed.checkpoint into Accelerate's ``pytorch_model_fsdp_<i>/`` and
``optimizer_<i>/`` folders; ``FULL_STATE_DICT`` gathers everything to process 0, which writes
``model[_i].safetensors`` and ``optimizer[_i].bin``. Both load on any number of processes
(DCP reshards; full state dicts are sharded as they load).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accel_backends.fsdp.common import FSDPStrategy, checked_plugin, version_class
from accel_backends.fsdp.fsdp1 import FSDP1Strategy
from accel_backends.fsdp.fsdp2 import FSDP2Strategy

if TYPE_CHECKING:
    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_core.kwargs_handlers import KwargsHandler


def create_fsdp_strategy(
    kwargs_handlers: Sequence[KwargsHandler] = (),
    plugin: FullyShardedDataParallelPlugin | None = None,
    **options: Any,
) -> FSDPStrategy:
    """The ``fsdp`` strategy of the plugin's ``fsdp_version``: :class:`FSDP2Strategy` (version 2,
    the default without a plugin) or :class:`FSDP1Strategy`. ``plugin`` is followed as given, or
    built from ``options`` (fields of ``FullyShardedDataParallelPlugin``, or ``fsdp_config``
    keys) and the launch environment; raises as :class:`FSDPStrategy` says."""
    chosen = checked_plugin(plugin, options, default_version=FSDPStrategy.fsdp_version)
    return version_class(chosen.fsdp_version)(kwargs_handlers, chosen)


__all__ = [
    "FSDP1Strategy",
    "FSDP2Strategy",
    "FSDPStrategy",
    "checked_plugin",
    "create_fsdp_strategy",
]
