"""Questions about a model's module tree: its classes, its order, DTensor parameters, TP size."""

from __future__ import annotations

from typing import Literal, overload

import torch


def get_module_class_from_name(module: torch.nn.Module, name: str) -> type[torch.nn.Module] | None:
    """The class named ``name`` of ``module`` or of its first descendant of that class (searched
    depth first, in registration order); None when no module of the tree has that class name."""
    if type(module).__name__ == name:
        return type(module)
    for child in module.children():
        found = get_module_class_from_name(child, name)
        if found is not None:
            return found
    return None


@overload
def get_module_children_bottom_up(
    model: torch.nn.Module, return_fqns: Literal[False] = False
) -> list[torch.nn.Module]: ...
@overload
def get_module_children_bottom_up(
    model: torch.nn.Module, return_fqns: Literal[True]
) -> list[tuple[str, torch.nn.Module]]: ...
def get_module_children_bottom_up(
    model: torch.nn.Module, return_fqns: bool = False
) -> list[torch.nn.Module] | list[tuple[str, torch.nn.Module]]:
    """Every module of ``model``, children before their parent; ``model`` comes last.

    The order is Accelerate's: a depth-first walk that visits the last child first, reversed
    (so among siblings the first registered comes first, each after all of its descendants).
    FSDP wraps modules in this order. With ``return_fqns`` each item is ``(qualified name,
    module)``; the model's name is ``""``.
    """
    visited: list[tuple[str, torch.nn.Module]] = []
    pending: list[tuple[str, torch.nn.Module]] = [("", model)]
    while pending:
        prefix, module = pending.pop()
        visited.append((prefix, module))
        for name, child in module.named_children():
            pending.append((f"{prefix}.{name}" if prefix else name, child))
    visited.reverse()
    if return_fqns:
        return visited
    return [module for _, module in visited]


def model_has_dtensor(model: torch.nn.Module) -> bool:
    """Whether a parameter of ``model`` is a ``torch.distributed`` ``DTensor`` (tensor parallel or
    FSDP2 sharding)."""
    if not torch.distributed.is_available():
        return False
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch < 2.5
        from torch.distributed._tensor import DTensor
    return any(isinstance(parameter, DTensor) for parameter in model.parameters())


def get_model_tp_size(model: torch.nn.Module) -> int | None:
    """The tensor-parallel degree a ``transformers`` model was sharded with, None if it wasn't.

    transformers < 5 stores it as ``model.tp_size``; transformers 5 in the ``distributed_config``
    (an object or a dict) of ``model.config``.
    """
    tp_size = getattr(model, "tp_size", None)
    if tp_size is not None:
        return int(tp_size)
    config = getattr(getattr(model, "config", None), "distributed_config", None)
    value = config.get("tp_size") if isinstance(config, dict) else getattr(config, "tp_size", None)
    return int(value) if value is not None else None
