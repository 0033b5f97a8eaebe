"""Getting the user's model back out of the wrappers ``prepare`` put around it."""

from __future__ import annotations

from functools import cache

import torch

from accel_base.engine_description import installed_engines
from accel_core.regional_compilation import has_compiled_regions


@cache
def _engine_wrappers() -> frozenset[str]:
    """The class names of the wrappers installed engines put around a model (their descriptions'
    ``wrapper_classes``), so that accel-core recognises them without importing any engine."""
    return frozenset(
        name for engine in installed_engines().values() for name in engine.wrapper_classes
    )


def is_compiled_module(module: object) -> bool:
    """Whether ``module`` is the result of ``torch.compile`` on a module."""
    compiled = getattr(torch, "_dynamo", None)
    eval_frame = getattr(compiled, "eval_frame", None)
    optimized = getattr(eval_frame, "OptimizedModule", None)
    return optimized is not None and isinstance(module, optimized)


def _is_wrapper(model: object) -> bool:
    parallel = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    # ``module`` first: a model without one wraps nothing, and the engines' descriptions (their
    # entry points, each engine's module) are read only for a model that has one.
    return isinstance(model, parallel) or (
        hasattr(model, "module") and type(model).__name__ in _engine_wrappers()
    )


def _remove_fp32_wrapper(model: torch.nn.Module) -> None:
    original = model.__dict__.pop("_original_forward", None)
    if original is None:
        return
    model.__dict__.pop("forward", None)
    bound_to_class = (
        getattr(original, "__self__", None) is model
        and getattr(original, "__func__", None) is type(model).forward
    )
    if not bound_to_class:
        model.forward = original  # type: ignore[method-assign]


def extract_model_from_parallel(
    model: torch.nn.Module,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> torch.nn.Module:
    """The model inside DDP/DataParallel (and engine) wrappers and, optionally, ``torch.compile``.

    Args:
        model: a model returned by ``prepare`` (or any module).
        keep_fp32_wrapper: keep the mixed-precision forward (autocast + fp32 outputs); ``False``
            restores the model's own ``forward``.
        keep_torch_compile: return the compiled module around the unwrapped one; ``False`` returns
            the original module ``torch.compile`` (or ``compile_regions``) was given.
        recursive: also unwrap wrapped submodules.
    """
    compiled = model if is_compiled_module(model) else None
    regional = None
    if compiled is not None:
        model = compiled._orig_mod  # type: ignore[assignment]
    elif "_orig_mod" in vars(model) and has_compiled_regions(model):
        regional = model  # compile_regions' copy keeps the original under __dict__["_orig_mod"]
        model = vars(regional)["_orig_mod"]
    while _is_wrapper(model):
        model = model.module  # type: ignore[assignment]
    if recursive:
        for name, child in list(model.named_children()):
            unwrapped = extract_model_from_parallel(
                child, keep_fp32_wrapper, keep_torch_compile, recursive=True
            )
            if unwrapped is not child:
                setattr(model, name, unwrapped)
    if not keep_fp32_wrapper:
        _remove_fp32_wrapper(model)
    if compiled is not None and keep_torch_compile:
        compiled._orig_mod = model  # type: ignore[assignment]
        return compiled
    if regional is not None and keep_torch_compile:
        # compile_regions copied the wrappers too: return the compiled copy of the model inside
        # (Accelerate returns the copied DDP wrapper itself).
        while _is_wrapper(regional):
            regional = regional.module  # type: ignore[assignment]
        if not keep_fp32_wrapper:
            _remove_fp32_wrapper(regional)
        vars(regional)["_orig_mod"] = model
        return regional
    return model
