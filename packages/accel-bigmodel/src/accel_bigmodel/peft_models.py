"""Recognising a PEFT model (``peft.PeftModel``) behind the wrappers training adds."""

from __future__ import annotations

import importlib.util

from torch import nn

# Wrappers whose ``.module`` is the model (matched by name: none of them is imported here).
_WRAPPERS_WITH_MODULE = frozenset(
    {"DistributedDataParallel", "DataParallel", "DeepSpeedEngine", "FullyShardedDataParallel"}
)


def _unwrap(model: nn.Module) -> nn.Module:
    while True:
        if hasattr(model, "_orig_mod"):  # torch.compile
            model = model._orig_mod
        elif type(model).__name__ in _WRAPPERS_WITH_MODULE and hasattr(model, "module"):
            model = model.module
        else:
            return model


def is_peft_model(model: nn.Module) -> bool:
    """Whether ``model`` is a ``peft.PeftModel``, once unwrapped from DDP, DataParallel,
    DeepSpeed, FSDP and ``torch.compile``. False when peft is not installed."""
    if importlib.util.find_spec("peft") is None:
        return False
    from peft import PeftModel

    return isinstance(_unwrap(model), PeftModel)
