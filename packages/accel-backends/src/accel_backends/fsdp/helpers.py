"""FSDP helpers under Accelerate's ``accelerate.utils.fsdp_utils`` names that need no strategy.

Environment toggles for transformers' rank-0 loading, re-tying weights after meta
initialisation, the FSDP2 auto-wrap policy and activation checkpointing, parameter renaming and
switching, and the FSDP2 gradient scaler. The calls that need the FSDP strategy itself are in
:mod:`accel_backends.fsdp.strategy_calls`.
"""

from __future__ import annotations

import functools
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

import torch

from accel_core.module_inspection import get_module_class_from_name

if TYPE_CHECKING:
    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin

_V = TypeVar("_V")
ParamInitFn = Callable[[torch.nn.Module], torch.nn.Module]


def enable_fsdp_ram_efficient_loading() -> None:
    """Make transformers' ``from_pretrained`` load weights on rank 0 only (FSDP), through the
    variables it reads: ``ACCELERATE_USE_FSDP`` (if unset) and ``FSDP_CPU_RAM_EFFICIENT_LOADING``.
    """
    os.environ.setdefault("ACCELERATE_USE_FSDP", "True")
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "True"


def disable_fsdp_ram_efficient_loading() -> None:
    """Make transformers load weights on every rank again (``FSDP_CPU_RAM_EFFICIENT_LOADING``)."""
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "False"


def ensure_weights_retied(
    param_init_fn: ParamInitFn, model: torch.nn.Module, device: torch.device
) -> ParamInitFn:
    """Wrap ``param_init_fn`` so parameters tied in ``model`` (``model._tied_weights_keys``) are
    tied again after it re-allocates them; ``param_init_fn`` itself when nothing is tied.

    The first re-allocated parameter of each tied group is kept and the others point to it.
    ``device`` is accepted for Accelerate's signature.
    """
    tied_names = getattr(model, "_tied_weights_keys", None)
    if not tied_names:
        return param_init_fn
    first_seen: dict[int, torch.nn.Parameter | None] = {}
    for name in tied_names:
        owner, _, attribute = name.rpartition(".")
        first_seen[id(getattr(model.get_submodule(owner), attribute))] = None

    def param_init_fn_tied_param(module: torch.nn.Module) -> torch.nn.Module:
        to_tie: dict[int, list[str]] = defaultdict(list)
        for name, parameter in module.named_parameters(recurse=False):
            if id(parameter) in first_seen:
                to_tie[id(parameter)].append(name)
        module = param_init_fn(module)
        for key, names in to_tie.items():
            for name in names:
                kept = first_seen[key]
                if kept is None:
                    first_seen[key] = getattr(module, name)
                else:
                    setattr(module, name, kept)
        return module

    return param_init_fn_tied_param


def fsdp2_switch_optimizer_parameters(
    optimizer: torch.optim.Optimizer, mapping: Mapping[int, torch.nn.Parameter]
) -> None:
    """Point ``optimizer``'s parameter groups at the sharded parameters, in place.

    ``mapping`` maps the address of each original parameter (``data_ptr()``, or an integer the
    caller stored in ``param.data_ptr``, as Accelerate's prepare does) to its sharded
    replacement. Raises ``KeyError`` if one is missing: training on would silently update the
    wrong tensors.
    """
    try:
        for group in optimizer.param_groups:
            group["params"] = [mapping[_address(parameter)] for parameter in group["params"]]
    except KeyError:
        raise KeyError(
            "A parameter in the optimizer couldn't be switched to its sharded version; training "
            "on would not update the model. Please report this as a bug."
        ) from None


def _address(tensor: torch.Tensor) -> int:
    stored = tensor.data_ptr
    return stored if isinstance(stored, int) else stored()


def fsdp2_prepare_auto_wrap_policy(
    fsdp2_plugin: FullyShardedDataParallelPlugin, model: torch.nn.Module
) -> Callable[[torch.nn.Module], bool] | None:
    """The FSDP2 wrap test for ``model`` from the plugin's FSDP1-style policy, or ``None``.

    Transformer-based: a module is wrapped when it is (or checkpoint-wraps) one of the layer
    classes (``transformer_cls_names_to_wrap``, else ``model._no_split_modules``). Size-based:
    when it has more than ``min_num_params`` parameters. Raises ``ValueError`` for a class name
    not in ``model``.
    """
    from torch.distributed.fsdp.wrap import (
        size_based_auto_wrap_policy,
        transformer_auto_wrap_policy,
    )

    policy = fsdp2_plugin.auto_wrap_policy
    if isinstance(policy, functools.partial):
        policy = policy.func
    if policy is transformer_auto_wrap_policy:
        names = fsdp2_plugin.transformer_cls_names_to_wrap
        if names is None:
            names = list(getattr(model, "_no_split_modules", None) or [])
        classes: list[type[torch.nn.Module]] = []
        for name in names:
            found = get_module_class_from_name(model, name)
            if found is None:
                raise ValueError(f"Could not find the transformer layer class {name} in the model.")
            classes.append(found)
        layer_types = tuple(classes)

        def wraps_layer(module: torch.nn.Module) -> bool:
            inner = getattr(module, "_checkpoint_wrapped_module", module)
            return bool(layer_types) and isinstance(inner, layer_types)

        return wraps_layer
    if policy is size_based_auto_wrap_policy:
        threshold = fsdp2_plugin.min_num_params or 0

        def is_large(module: torch.nn.Module) -> bool:
            return sum(p.numel() for p in module.parameters()) > threshold

        return is_large
    return None


def get_fsdp2_grad_scaler(**kwargs: object) -> torch.amp.GradScaler:
    """torch's ``GradScaler`` built with ``kwargs`` (FSDP2 shards need no sharded scaler)."""
    return torch.amp.GradScaler(**kwargs)  # type: ignore[arg-type]


def fsdp2_canonicalize_names(named_params: Mapping[str, _V]) -> dict[str, _V]:
    """``named_params`` with the name parts that activation checkpointing
    (``._checkpoint_wrapped_module``) and ``torch.compile`` (``_orig_mod.``) insert removed."""
    renamed = {k.replace("._checkpoint_wrapped_module", ""): v for k, v in named_params.items()}
    renamed = {k.removeprefix("_orig_mod."): v for k, v in renamed.items()}
    return {k.replace("._orig_mod", ""): v for k, v in renamed.items()}


def get_parameters_from_modules(
    modules: Iterable[torch.nn.Module] | str | None,
    model: torch.nn.Module,
    device: torch.device | str | int | None,
) -> set[torch.nn.Parameter]:
    """The parameters of ``modules``: modules, or a regex that module names of ``model`` must
    match in full (those modules are moved to ``device`` first). ``None`` gives no parameters.
    """
    if modules is None:
        return set()
    if isinstance(modules, str):
        pattern = re.compile(modules)
        matched = []
        for name, module in model.named_modules():
            if pattern.fullmatch(name):
                module.to(device)
                matched.append(module)
        modules = matched
    return {parameter for module in modules for parameter in module.parameters()}
