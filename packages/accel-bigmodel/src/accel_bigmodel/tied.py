"""Tied parameters: one tensor used under several names (a language model's input and output
embeddings). They must share one device and stay one object after loading and dispatch."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from torch import nn

logger = logging.getLogger(__name__)


def find_tied_parameters(model: nn.Module, **kwargs: object) -> list[list[str]]:
    """Groups of parameter names that refer to the same parameter, each group sorted.

    Groups come in the order their parameter first appears in ``model.named_parameters()`` (the
    order Accelerate gives, which ``infer_auto_device_map`` depends on). Example:
    ``[["lm_head.weight", "transformer.wte.weight"]]`` for a GPT-2 with tied embeddings. Works on
    the meta device (ties are found by object identity).
    """
    by_id: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(param), []).append(name)
    return [sorted(names) for names in by_id.values() if len(names) > 1]


def _resolve(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    module_name, _, attribute = name.rpartition(".")
    return (model.get_submodule(module_name) if module_name else model), attribute


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Make every name of each group in ``tied_params`` point to one parameter again.

    The first name of a group that is not on the meta device gives the parameter (so loading
    only one of the tied names is enough); if all are on meta, the first name gives it.
    """
    for group in tied_params:
        params = []
        for name in group:
            module, attribute = _resolve(model, name)
            params.append(getattr(module, attribute))
        source = next((p for p in params if p.device.type != "meta"), params[0])
        for name in group:
            module, attribute = _resolve(model, name)
            if getattr(module, attribute) is not source:
                setattr(module, attribute, source)


def _device_of(name: str, device_map: Mapping[str, object]) -> object:
    parts = name.split(".")
    for end in range(len(parts), -1, -1):
        prefix = ".".join(parts[:end])
        if prefix in device_map:
            return device_map[prefix]
    return None


def check_tied_parameters_on_same_device(
    tied_params: list[list[str]], device_map: Mapping[str, object]
) -> None:
    """Log a warning for every tied group whose names the device map sends to different devices."""
    for group in tied_params:
        devices = {name: _device_of(name, device_map) for name in group}
        if len(set(map(str, devices.values()))) > 1:
            logger.warning(
                "tied parameters %s are mapped to different devices %s; they will be untied",
                group,
                devices,
            )


def check_tied_parameters_in_config(model: nn.Module) -> bool:
    """Whether a transformers model says that some of its weights should be tied.

    True for a ``PreTrainedModel`` whose (decoder) config has ``tie_word_embeddings`` and that
    has output embeddings, whose config ties encoder and decoder (``is_encoder_decoder`` and
    ``tie_encoder_decoder``), or with a module defining ``_tie_weights``. Always False for other
    models.
    """
    if "PreTrainedModel" not in [cls.__name__ for cls in type(model).__mro__]:
        return False
    config = getattr(model, "config", None)
    text_config = config
    if config is not None and hasattr(config, "get_text_config"):
        text_config = config.get_text_config(decoder=True)
    get_output_embeddings = getattr(model, "get_output_embeddings", None)
    word = bool(
        text_config is not None
        and getattr(text_config, "tie_word_embeddings", False)
        and get_output_embeddings is not None
        and get_output_embeddings() is not None
    )
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False)) and bool(
        getattr(config, "tie_encoder_decoder", False)
    )
    return word or encoder_decoder or any(hasattr(m, "_tie_weights") for m in model.modules())
