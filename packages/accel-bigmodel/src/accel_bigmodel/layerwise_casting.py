"""Layerwise casting: keep weights in a small storage dtype, compute in a wider one.

``attach_layerwise_casting_hooks`` walks the model and, on each layer of a supported class
(``Linear``, ``Conv1d/2d/3d``, ``ConvTranspose1d/2d/3d``), attaches a ``LayerwiseCastingHook``:
the layer's floating-point tensors are cast to ``storage_dtype`` once, to ``compute_dtype``
just before its forward, and back to ``storage_dtype`` right after. Only one layer at a time is
held in the wide dtype, so a model kept in ``float8_e4m3fn`` and run in ``bfloat16`` takes about
half the memory of a ``bfloat16`` model, at the cost of the precision lost in storage. Inputs
are not cast: give the model inputs in ``compute_dtype``. Other layers (norms, embeddings) are
left as they are.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch import nn

from accel_bigmodel.hooks import ModelHook, add_hook_to_module
from accel_ops import SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING

logger = logging.getLogger(__name__)


class LayerwiseCastingHook(ModelHook):
    """Store the module in ``storage_dtype``; run its forward in ``compute_dtype``.

    ``init_hook`` casts the module to ``storage_dtype``; ``pre_forward`` casts it to
    ``compute_dtype``; ``post_forward`` casts it back. ``module.to(dtype=...)`` only touches
    floating-point tensors. With ``non_blocking`` the copies are asynchronous (on GPUs).
    """

    _is_stateful = False

    def __init__(
        self, storage_dtype: torch.dtype, compute_dtype: torch.dtype, non_blocking: bool
    ) -> None:
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype
        self.non_blocking = non_blocking
        # torch.compile must not trace the casts. Wrapped here rather than with a decorator, so
        # that ``import accel_bigmodel`` does not import torch._dynamo.
        self.pre_forward = torch.compiler.disable(self.pre_forward)  # type: ignore[method-assign]
        self.post_forward = torch.compiler.disable(self.post_forward)  # type: ignore[method-assign]

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Cast ``module`` to the storage dtype."""
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        """Cast ``module`` to the compute dtype; the inputs pass unchanged."""
        module.to(dtype=self.compute_dtype, non_blocking=self.non_blocking)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Cast ``module`` back to the storage dtype; the output passes unchanged."""
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return output


def attach_layerwise_casting_hooks(
    module: nn.Module,
    storage_dtype: torch.dtype,
    compute_dtype: torch.dtype,
    skip_modules_pattern: str | tuple[str, ...] | list[str] | None = None,
    skip_modules_classes: tuple[type[nn.Module], ...] | None = None,
    non_blocking: bool = False,
) -> None:
    """Attach a ``LayerwiseCastingHook`` to every supported layer of ``module``.

    Layers are instances of accel-ops' ``SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING``; the walk does
    not go inside them. A module (and everything under it) is skipped when it is an instance of
    one of ``skip_modules_classes`` or when one of the regular expressions ``skip_modules_pattern``
    matches somewhere in its dotted name (``re.search``); a single string is one pattern.
    A hook already attached to a layer is kept and runs first.

    Example::

        attach_layerwise_casting_hooks(
            model, torch.float8_e4m3fn, torch.bfloat16, skip_modules_pattern=("norm", "lm_head")
        )
    """
    if isinstance(skip_modules_pattern, str):
        # Accelerate iterates a string character by character; here it is one pattern.
        skip_modules_pattern = (skip_modules_pattern,)
    patterns = [re.compile(p) for p in skip_modules_pattern or ()]
    skip_classes = tuple(skip_modules_classes or ())
    hook_args = (storage_dtype, compute_dtype, non_blocking)
    stack: list[tuple[str, nn.Module]] = [("", module)]
    while stack:
        name, current = stack.pop()
        if isinstance(current, skip_classes) or any(p.search(name) for p in patterns):
            logger.debug("layerwise casting: skipping %r", name)
            continue
        if isinstance(current, SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING):
            logger.debug("layerwise casting: casting %r", name)
            add_hook_to_module(current, LayerwiseCastingHook(*hook_args), append=True)
            continue
        children = [(f"{name}.{n}" if name else n, c) for n, c in current.named_children()]
        stack.extend(reversed(children))
