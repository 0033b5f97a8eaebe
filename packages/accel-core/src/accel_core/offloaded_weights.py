"""The full weights of a model whose weights a hook keeps offloaded, without importing the library
that offloaded them.

A library that offloads a module's weights (keeps them on the meta device between forward passes
and brings them in from CPU memory or disk just before the module runs, as accel-bigmodel's
``dispatch_model``, ``cpu_offload`` and ``disk_offload`` do) attaches a hook to the module as
``module._hf_hook``. ``model.state_dict()`` would then hold empty tensors. accel-core does not
import that library (accel-bigmodel depends on accel-ops, not on accel-core, and accel-core not on
it): it asks the hooks. A hook that has the two methods of :class:`OffloadingHook` says whether it
offloads its module's weights and, if so, reads the whole model's. A hook without them (another
library's) counts as offloading nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class OffloadingHook(Protocol):
    """What accel-core asks of a module's hook (``module._hf_hook``) before saving the model.

    Call order: :meth:`offloads_weights` on the hooks of the model's modules in
    ``model.modules()`` order; :meth:`offloaded_model_state_dict` once, on the first hook that
    answered ``True``, with the whole model.
    """

    def offloads_weights(self) -> bool:
        """Whether this hook keeps its module's weights offloaded between forward passes."""
        ...

    def offloaded_model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict of ``model`` (which holds this hook's module): every tensor on the
        CPU, offloaded ones read in, keys as ``model.state_dict()`` names them."""
        ...


def offloaded_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The full weights of ``model`` when a hook of one of its modules keeps weights offloaded
    (read through that hook, see :class:`OffloadingHook`); ``None`` for any other model."""
    for module in model.modules():
        hook = getattr(module, "_hf_hook", None)
        if hook is not None and isinstance(hook, OffloadingHook) and hook.offloads_weights():
            return hook.offloaded_model_state_dict(model)
    return None
