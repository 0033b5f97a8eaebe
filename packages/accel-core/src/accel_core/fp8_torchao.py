"""torchao FP8 training (Accelerate's ``accelerate.utils.ao``): out of scope in accel.

The layer-selection helpers are plain module walks and work as in Accelerate; ``has_ao_layers``
answers truthfully (False unless torchao is installed and the model holds its ``Float8Linear``);
``convert_model_to_fp8_ao`` raises :class:`~accel_core.out_of_scope.OutOfScopeError`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accel_core.out_of_scope import is_importable, out_of_scope


def find_first_last_linear_layers(model: torch.nn.Module) -> tuple[str | None, str | None]:
    """The qualified names of the first and last ``nn.Linear`` of ``model`` (None when none)."""
    names = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return (names[0], names[-1]) if names else (None, None)


def filter_linear_layers(
    module: torch.nn.Module, fqn: str, layers_to_filter: list[str | None]
) -> bool:
    """Whether ``module`` (named ``fqn``) would be converted to FP8.

    False for an ``nn.Linear`` whose in or out features are not multiples of 16, and for a name
    in ``layers_to_filter``; True otherwise.
    """
    if isinstance(module, torch.nn.Linear) and (
        module.in_features % 16 != 0 or module.out_features % 16 != 0
    ):
        return False
    return fqn not in layers_to_filter


def filter_first_and_last_linear_layers(module: torch.nn.Module, fqn: str) -> bool:
    """:func:`filter_linear_layers`, leaving out the first and last linear layers of ``module``."""
    first, last = find_first_last_linear_layers(module)
    return filter_linear_layers(module, fqn, layers_to_filter=[first, last])


def has_ao_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds torchao ``Float8Linear`` layers (False when torchao is absent)."""
    if not is_importable("torchao"):
        return False
    from torchao.float8.float8_linear import Float8Linear

    return any(isinstance(module, Float8Linear) for module in model.modules())


def convert_model_to_fp8_ao(
    model: torch.nn.Module,
    config: object | None = None,
    module_filter_func: Callable[[torch.nn.Module, str], bool] | None = None,
) -> None:
    """Accelerate converts the linear layers to torchao ``Float8Linear``; accel refuses."""
    raise out_of_scope(
        "convert_model_to_fp8_ao (FP8 training with torchao)",
        'train in mixed_precision="bf16", or call torchao.float8.convert_to_float8_training '
        "yourself",
    )
