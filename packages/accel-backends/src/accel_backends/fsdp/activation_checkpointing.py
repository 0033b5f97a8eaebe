"""Activation checkpointing for FSDP2: the layers the plugin's auto-wrap policy picks recompute
their forward in backward instead of keeping its activations.

As in Hugging Face Accelerate 1.15 (``fsdp2_apply_ac``): before sharding, each sub-module the
policy selects (the transformer layer classes, or the modules above ``min_num_params``) is
replaced, bottom-up, by torch's non-reentrant ``checkpoint_wrapper`` (with ``offload_wrapper``
around it for ``activation_checkpointing_offload``). The wrapper then becomes the FSDP unit in
place of the layer (:mod:`accel_backends.fsdp.sharding` looks through it), so the units and
their communication are the same as without checkpointing.

Names: a wrapped layer's parameters are reached through ``_checkpoint_wrapped_module``, so
``model.named_parameters()`` names change (``blocks.0._checkpoint_wrapped_module.linear.weight``);
``state_dict()``, ``torch.distributed.checkpoint.state_dict`` and therefore every checkpoint keep
the plain names. :func:`canonical_name` maps one to the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from accel_backends.errors import strategy_not_built
from accel_backends.fsdp.helpers import fsdp2_prepare_auto_wrap_policy
from accel_core.module_inspection import get_module_children_bottom_up

if TYPE_CHECKING:
    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin

#: The attribute torch's ``CheckpointWrapper`` keeps the wrapped module under.
WRAPPED = "_checkpoint_wrapped_module"

#: Modules without a forward of their own (their parent iterates them): never checkpointed,
#: never an FSDP unit (``fully_shard`` refuses them).
CONTAINERS = (torch.nn.ModuleList, torch.nn.ModuleDict)


def checkpoint_layers(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[str]:
    """Wrap, in place, the sub-modules of ``model`` that ``plugin``'s auto-wrap policy picks in
    non-reentrant activation checkpointing; return their qualified names (plain, bottom-up).

    Without a policy nothing is wrapped (the model itself never is: Accelerate's rule), and a
    layer checkpointed already is left as it is. Raises ``ValueError`` for a transformer layer
    class name not in ``model``.
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        ActivationWrapper,
        CheckpointImpl,
        checkpoint_wrapper,
        offload_wrapper,
    )

    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    if policy is None:
        return []
    wrapped: list[str] = []
    for name, layer in get_module_children_bottom_up(model, return_fqns=True)[:-1]:
        if isinstance(layer, ActivationWrapper) or is_wrapped_inner(name):
            continue  # checkpointed already (by fsdp2_apply_ac): never twice
        if isinstance(layer, CONTAINERS):
            continue  # no forward to recompute (size-based policies pick ModuleLists)
        if not policy(layer):
            continue
        replacement = checkpoint_wrapper(
            layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False
        )
        if plugin.activation_checkpointing_offload:
            replacement = offload_wrapper(replacement)
        model.set_submodule(name, replacement)
        wrapped.append(canonical_name(name))
    return wrapped


def is_wrapped_inner(name: str) -> bool:
    """Whether the module named ``name`` is the one a checkpoint (or offload) wrapper holds: the
    outermost wrapper, not it, is the FSDP unit."""
    return name == WRAPPED or name.endswith(f".{WRAPPED}")


def innermost(module: torch.nn.Module) -> torch.nn.Module:
    """The layer inside ``module``'s checkpoint and offload wrappers (``module`` if none)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper

    while isinstance(module, ActivationWrapper):
        module = getattr(module, WRAPPED)
    return module


#: The attribute FSDP1's ``FullyShardedDataParallel`` keeps the wrapped module under.
FSDP1_WRAPPED = "_fsdp_wrapped_module"


def canonical_name(name: str) -> str:
    """``name`` (of a parameter or module) without the ``_checkpoint_wrapped_module`` parts (and
    FSDP1's ``_fsdp_wrapped_module``: checkpoints never show either)."""
    return ".".join(part for part in name.split(".") if part not in (WRAPPED, FSDP1_WRAPPED))


class _FSDPState(Protocol):
    fsdp_plugin: FullyShardedDataParallelPlugin | None


class _AcceleratorWithFSDP(Protocol):
    @property
    def state(self) -> _FSDPState: ...


def fsdp2_apply_ac(accelerator: _AcceleratorWithFSDP, model: torch.nn.Module) -> torch.nn.Module:
    """Wrap the layers the plugin's auto-wrap policy picks in activation checkpointing.

    With ``activation_checkpointing_offload`` the saved inputs also go to CPU. The model is
    changed in place and returned (see :func:`checkpoint_layers`).
    Raises ``StrategyNotBuiltError`` when ``accelerator`` has no FSDP plugin.
    """
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is None:
        raise strategy_not_built("FSDP", "fsdp2_apply_ac (an Accelerator with an FSDP plugin)")
    checkpoint_layers(model, plugin)
    return model
