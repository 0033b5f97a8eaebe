"""Gradients FSDP2 holds inside an accumulation cycle, for a checkpoint taken mid-cycle.

While gradient synchronisation is off (``set_requires_gradient_sync(False)``, what the strategy's
``no_sync`` does), FSDP2 keeps each parameter's *unsharded*, not yet reduced gradient of this
process: in ``FSDPParam.unsharded_accumulated_grad`` when it accumulates in another dtype, else
on the unsharded parameter's ``.grad``. The sharded parameters' ``.grad`` stay empty, so a
checkpoint that saved those would lose the cycle's micro-batches. The next synchronising
backward adds its gradient to ``unsharded_accumulated_grad`` and reduce-scatters the sum, which
is where a restored gradient goes.

These are torch's internals (``torch.distributed.fsdp._fully_shard``, torch 2.6 to 2.13): if
they change, :class:`AccumulationStateError` says so instead of saving the wrong thing.

:class:`FSDP2Accumulation` and :class:`FSDP1Accumulation` are the strategies' accumulation
policies (``strategy.accumulation``) built on them.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from accel_backends.fsdp.activation_checkpointing import canonical_name
from accel_core.strategies.accumulation_policy import AccumulationPolicy
from accel_core.unwrap import extract_model_from_parallel


class AccumulationStateError(RuntimeError):
    """FSDP2's accumulation buffers are not where this torch version was expected to keep them."""


def _fsdp_params(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    """``(name, FSDPParam)`` for every parameter FSDP2 manages in ``model`` (plain names)."""
    from torch.distributed.fsdp import FSDPModule

    names = {id(module): name for name, module in model.named_modules()}
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
        if group is None:
            continue
        for fsdp_param in group.fsdp_params:
            info = getattr(fsdp_param, "_module_info", None)
            if info is None or id(info.module) not in names:
                raise AccumulationStateError(
                    "FSDP2's parameters no longer record their module (FSDPParam._module_info): "
                    f"saving inside an accumulation cycle is not supported with torch "
                    f"{torch.__version__}; save at the end of a cycle."
                )
            prefix = names[id(info.module)]
            yield (
                canonical_name(f"{prefix}.{info.param_name}" if prefix else info.param_name),
                (fsdp_param),
            )


def accumulated_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This process's unreduced gradients so far, full size, by parameter name."""
    found: dict[str, torch.Tensor] = {}
    for name, fsdp_param in _fsdp_params(model):
        grad = fsdp_param.unsharded_accumulated_grad
        if grad is None:
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            grad = None if unsharded is None else unsharded.grad
        if grad is not None:
            found[name] = grad.detach()
    return found


def restore_accumulated_gradients(
    model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
) -> None:
    """Put saved gradients where the next synchronising backward adds to them (``None``, or a
    parameter without one: no gradient)."""
    for name, fsdp_param in _fsdp_params(model):
        saved = None if gradients is None else gradients.get(name)
        unsharded = getattr(fsdp_param, "_unsharded_param", None)
        if unsharded is not None:
            unsharded.grad = None
        if saved is None:
            fsdp_param.unsharded_accumulated_grad = None
            continue
        # reduce_dtype is set by the first forward; before it, the parameter's dtype
        dtype = getattr(fsdp_param, "reduce_dtype", None) or fsdp_param.sharded_param.dtype
        device = fsdp_param.sharded_param.device
        fsdp_param.unsharded_accumulated_grad = saved.to(device=device, dtype=dtype).clone()
    for parameter in model.parameters():
        parameter.grad = None


@contextlib.contextmanager
def gradient_sync_off(model: torch.nn.Module) -> Iterator[None]:
    """Backward passes of ``model`` (sharded by ``fully_shard``) keep unsharded gradients
    locally instead of reduce-scattering them; anything else is left as it is."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        yield
        return
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


class FSDP2Accumulation(AccumulationPolicy):
    """FSDP2's accumulation policy: a checkpoint inside a cycle keeps the unsharded gradients
    FSDP2 holds while synchronisation is off (the functions above)."""

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """This process's unreduced gradients of the cycle so far (FSDP2 keeps them unsharded
        while synchronisation is off; see :mod:`accel_backends.fsdp.accumulation`); a model
        split by tensor parallelism alone keeps them in its parameters."""
        if not _is_sharded(extract_model_from_parallel(model)):
            return super().accumulated_gradients(model)
        return accumulated_gradients(extract_model_from_parallel(model))

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Put them back where the next synchronising backward adds to them."""
        if not _is_sharded(extract_model_from_parallel(model)):
            super().restore_accumulated_gradients(model, gradients)
            return
        restore_accumulated_gradients(extract_model_from_parallel(model), gradients)


class FSDP1Accumulation(AccumulationPolicy):
    """FSDP1's accumulation policy: its flat parameters keep the cycle's gradients, which a
    checkpoint can't save (as under DeepSpeed)."""

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Nothing, with a warning: FSDP1 keeps the cycle's gradients inside its flat
        parameters."""
        warnings.warn(
            "save_state inside a gradient accumulation cycle under FSDP1: the gradients "
            "accumulated so far stay inside its flat parameters and are not saved, so a run "
            "resumed from this checkpoint continues without them. Save at the end of a "
            "cycle to resume exactly, or use fsdp_version 2, which saves them.",
            stacklevel=2,
        )
        return {}

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Nothing: nothing was saved (see :meth:`accumulated_gradients`)."""


def _is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)
