"""Following parameters a strategy replaced: FSDP2's ``fully_shard`` swaps a module's parameters
for sharded ones, so an optimizer built before ``prepare`` must be pointed at the new ones.

``Strategy.setup`` records, for every model, which parameter each name held before
``setup_module`` and which it holds after; :func:`repoint_optimizer` then swaps them in the
optimizer's parameter groups (moving any state kept for the old tensor to the new one).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

#: ``id(old parameter) -> (old, new)``, only for replaced parameters, both held weakly: the map
#: keeps neither the full-size originals nor the set-up parameters alive (``free_memory`` frees
#: them), and a dead original can't be mistaken for a new tensor that reuses its id.
ParameterMap = dict[int, tuple[weakref.ref[torch.nn.Parameter], weakref.ref[torch.nn.Parameter]]]


def match_parameters(
    before: Sequence[tuple[str, torch.nn.Parameter]], module: torch.nn.Module
) -> ParameterMap:
    """The parameters of ``module`` (unwrapped) that replaced those of ``before``, by name."""
    after = dict(module.named_parameters())
    replaced: ParameterMap = {}
    for name, old in before:
        new = after.get(name)
        if new is not None and new is not old:
            replaced[id(old)] = (weakref.ref(old), weakref.ref(new))
    return replaced


def repoint_optimizer(optimizer: torch.optim.Optimizer, parameter_map: ParameterMap) -> int:
    """Replace, in place, every parameter of ``optimizer`` found in ``parameter_map`` by its new
    one (its state moves along with it); return how many were replaced. The same optimizer object
    stays, so schedulers built on it keep working."""
    count = 0
    for group in optimizer.param_groups:
        params = group["params"]
        for index, param in enumerate(params):
            entry = parameter_map.get(id(param))
            if entry is None or entry[0]() is not param:
                continue
            new = entry[1]()
            if new is None:
                continue
            params[index] = new
            if param in optimizer.state:
                optimizer.state[new] = optimizer.state.pop(param)
            count += 1
    return count


def prune(parameter_map: ParameterMap) -> None:
    """Drop the entries whose original or replacement is gone."""
    for key in [k for k, (old, new) in parameter_map.items() if old() is None or new() is None]:
        del parameter_map[key]
