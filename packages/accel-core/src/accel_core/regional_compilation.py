"""Regional compilation: ``torch.compile`` each repeated block instead of the whole model.

A transformer is mostly one block class repeated in an ``nn.ModuleList`` (``model.layers``,
``model.transformer.h``). Compiling each block on its own compiles the first one and hits the
compiler's cache for the others, so cold start costs one block instead of the whole graph; the
modules around the blocks (embeddings, head) are compiled one by one. See the PyTorch recipe
"Reducing torch.compile cold start compilation time with regional compilation".

:func:`compile_regions` returns a new model and leaves the given one untouched (the new model
shares its parameters and keeps it as ``__dict__["_orig_mod"]``, which
:func:`~accel_core.unwrap.extract_model_from_parallel` follows). The ``*_deepspeed`` and
``*_fsdp2`` variants compile in place with ``module.compile()``, which keeps ``nn.Module``'s call
path, so hooks that an engine installs later still run.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch


def _optimized_module_class() -> type | None:
    eval_frame = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    return getattr(eval_frame, "OptimizedModule", None)


def has_compiled_regions(module: torch.nn.Module) -> bool:
    """Whether a submodule of ``module`` (or ``module`` itself, when it has children) is the
    result of ``torch.compile``."""
    optimized = _optimized_module_class()
    if optimized is None or not module._modules:
        return False
    return any(isinstance(submodule, optimized) for submodule in module.modules())


def is_repeated_blocks(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a non-empty ``nn.ModuleList`` whose items are all instances of the
    first item's class."""
    if not isinstance(module, torch.nn.ModuleList) or len(module) == 0:
        return False
    block_class = type(module[0])
    return all(isinstance(block, block_class) for block in module)


def has_repeated_blocks(module: torch.nn.Module) -> bool:
    """Whether ``module`` or any module below it :func:`is_repeated_blocks`."""
    return bool(module._modules) and any(is_repeated_blocks(m) for m in module.modules())


def _shallow_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A new instance sharing ``module``'s parameters and buffers, with no children yet.

    Methods bound to ``module`` in its instance dict (a wrapped ``forward``) are rebound to the
    copy, so calling the copy runs the copy's children.
    """
    clone = copy.copy(module)
    for name, value in list(vars(clone).items()):
        if isinstance(value, types.MethodType) and value.__self__ is module:
            vars(clone)[name] = types.MethodType(value.__func__, clone)
    vars(clone)["_modules"] = {}
    return clone


def _compile_tree(module: torch.nn.Module, compile_kwargs: dict[str, Any]) -> torch.nn.Module:
    if is_repeated_blocks(module):
        return torch.nn.ModuleList(torch.compile(block, **compile_kwargs) for block in module)
    if has_repeated_blocks(module):
        clone = _shallow_copy(module)
        for name, child in module.named_children():
            clone.add_module(name, _compile_tree(child, compile_kwargs))
        return clone
    return torch.compile(module, **compile_kwargs)  # type: ignore[return-value]


def compile_regions(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """A copy of ``module`` whose repeated blocks, and the modules around them, are compiled.

    Every block of each ``nn.ModuleList`` of one class is compiled separately (the first compile
    is reused by the others); each other leaf of the tree on the way to the blocks is compiled
    as a whole. A model without repeated blocks is simply ``torch.compile(module)``.
    ``compile_kwargs`` go to ``torch.compile`` (``backend``, ``mode``, ``fullgraph``,
    ``dynamic``, ``options``). The original stays reachable as ``__dict__["_orig_mod"]``.
    """
    compiled = _compile_tree(module, compile_kwargs)
    if "_orig_mod" not in vars(compiled):
        vars(compiled)["_orig_mod"] = module
    return compiled


def _compile_in_place(module: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
    if is_repeated_blocks(module):
        for block in module:
            block.compile(**compile_kwargs)
    elif has_repeated_blocks(module):
        for child in module.children():
            _compile_in_place(child, compile_kwargs)
    else:
        module.compile(**compile_kwargs)


def compile_regions_deepspeed(module: torch.nn.Module, **compile_kwargs: Any) -> None:
    """Regional compilation in place (``module.compile()`` on each region), for the model inside
    a DeepSpeed engine, whose hooks and offloaded parameters ``torch.compile(module)`` would
    bypass. Works on any module."""
    _compile_in_place(module, compile_kwargs)


def compile_regions_fsdp2(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """Regional compilation in place, for a model about to be sharded with FSDP2's
    ``fully_shard``: its hooks go through ``nn.Module.__call__``, which an ``OptimizedModule``
    would skip. Returns ``module``."""
    _compile_in_place(module, compile_kwargs)
    return module
