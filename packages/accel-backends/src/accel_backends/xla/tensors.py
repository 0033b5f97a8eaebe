"""Moving tensors between the host and the XLA device: state dicts out, modules in.

``torch.save`` of an XLA tensor writes an XLA tensor (loading it needs torch_xla), and
safetensors can't read its memory at all; torch_xla's own ``xm.save`` copies to CPU first. So does
:func:`to_cpu`, and the files the ``xla`` strategy writes are the plain CPU files of every other
strategy.
"""

from __future__ import annotations

from typing import TypeVar, cast

import torch

_T = TypeVar("_T")


def is_xla_tensor(value: object) -> bool:
    """Whether ``value`` is a tensor on an XLA device."""
    return isinstance(value, torch.Tensor) and value.device.type == "xla"


def to_cpu(data: _T) -> _T:
    """``data`` with every XLA tensor replaced by a detached CPU copy; other values unchanged.

    Dicts (their type kept), lists and tuples are walked. The pending lazy computation is run
    first (``torch_xla.sync``), so the copies hold the values of the step that just finished.
    One XLA tensor reached twice becomes one CPU tensor reached twice: give a model's state dict
    with ``keep_vars=True`` and tied weights (one ``Parameter`` under two names) stay tied, so
    safetensors stores them once, as it does for tied CPU weights.
    """
    import torch_xla

    torch_xla.sync()
    return cast(_T, _convert(data, {}))


def _convert(value: object, copies: dict[int, torch.Tensor]) -> object:
    if isinstance(value, torch.Tensor) and value.device.type == "xla":
        if id(value) not in copies:
            copies[id(value)] = value.detach().cpu()
        return copies[id(value)]
    if isinstance(value, dict):
        return type(value)((k, _convert(v, copies)) for k, v in value.items())
    if isinstance(value, list):
        return [_convert(v, copies) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_convert(v, copies) for v in value)
    return value


def move_keeping_ties(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``module.to(device)`` with its tied parameters still tied.

    ``Module.to`` can't change a CPU parameter into an XLA one in place, so it gives each module
    a new ``Parameter``: a weight shared by two modules (an embedding and an output layer)
    becomes two weights that then train apart. Here every other name of a shared parameter is
    pointed at the first name's new one again.
    """
    names: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    moved = module.to(device)
    for first, *others in (group for group in names.values() if len(group) > 1):
        shared = moved.get_parameter(first)
        for name in others:
            owner, _, attribute = name.rpartition(".")
            setattr(moved.get_submodule(owner), attribute, shared)
    return moved
