"""Transformer Engine FP8 (Accelerate's ``accelerate.utils.transformer_engine``): out of scope.

``has_transformer_engine_layers`` answers truthfully (False unless Transformer Engine is installed
and the model holds its layers); converting a model or wrapping its forward in FP8 autocast raises
:class:`~accel_core.out_of_scope.OutOfScopeError`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accel_core.out_of_scope import OutOfScopeError, is_importable, out_of_scope

_FEATURE = "FP8 training with Transformer Engine"
_INSTEAD = 'train in mixed_precision="bf16" or "fp16"'


def _refuse(name: str) -> OutOfScopeError:
    return out_of_scope(f"{name} ({_FEATURE})", _INSTEAD)


def has_transformer_engine_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds Transformer Engine ``Linear``, ``LayerNorm`` or
    ``TransformerLayer`` modules (False when Transformer Engine is not installed)."""
    if not is_importable("transformer_engine"):
        return False
    import transformer_engine.pytorch as te

    layers = (te.LayerNorm, te.Linear, te.TransformerLayer)
    return any(isinstance(module, layers) for module in model.modules())


def convert_model(
    model: torch.nn.Module,
    to_transformer_engine: bool = True,
    _convert_linear: bool = True,
    _convert_ln: bool = True,
) -> None:
    """Accelerate swaps linear and layer-norm layers for Transformer Engine's; accel refuses."""
    raise _refuse("convert_model")


def contextual_fp8_autocast(
    model_forward: Callable[..., object], fp8_recipe: object, use_during_eval: bool = False
) -> Callable[..., object]:
    """Accelerate wraps ``model_forward`` in ``fp8_autocast``; accel refuses."""
    raise _refuse("contextual_fp8_autocast")


def apply_fp8_autowrap(model: torch.nn.Module, fp8_recipe_handler: object) -> torch.nn.Module:
    """Accelerate wraps the model's forward in FP8 autocast; accel refuses."""
    raise _refuse("apply_fp8_autowrap")
