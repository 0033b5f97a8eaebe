"""Following parameters a strategy replaced: FSDP2's ``fully_shard`` swaps a module's parameters
for sharded ones, so an optimizer built before ``prepare`` must be pointed at the new ones.

``Strategy.setup`` records, for every model, which parameter each name held before
``setup_module`` and which it holds after; :func:`repoint_optimizer` then swaps them in the
optimizer's parameter groups (and drops state kept for the old tensors, which an optimizer built
before ``prepare`` has not got yet).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: ``id(old parameter) -> (old parameter, new parameter)``, only for replaced parameters. The old
#: parameter is kept alive so its id can't be reused by another tensor.
ParameterMap = dict[int, tuple[torch.nn.Parameter, torch.nn.Parameter]]


def match_parameters(
    before: Sequence[tuple[str, torch.nn.Parameter]], module: torch.nn.Module
) -> ParameterMap:
    """The parameters of ``module`` (unwrapped) that replaced those of ``before``, by name."""
    after = dict(module.named_parameters())
    replaced: ParameterMap = {}
    for name, old in before:
        new = after.get(name)
        if new is not None and new is not old:
            replaced[id(old)] = (old, new)
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
            if entry is None or entry[0] is not param:
                continue
            new = entry[1]
            params[index] = new
            if param in optimizer.state:
                optimizer.state[new] = optimizer.state.pop(param)
            count += 1
    return count
