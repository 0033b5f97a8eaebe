"""The registry of model-config parsers of the Megatron-LM integration (out of scope in accel).

:func:`add_model_config_to_megatron_parser` registers a parser in
:data:`MODEL_CONFIGS_TO_MEGATRON_PARSERS` as Accelerate's does, so code that adds its own still
imports and runs. The built-in parsers (BERT, GPT-2, T5, Llama, GLM-4 MoE) would fill Megatron-LM
arguments for a run accel does not start: calling one raises ``OutOfScopeError``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NoReturn, TypeVar

from accel_backends.out_of_scope_megatron import MegatronLMPlugin, megatron_out_of_scope

_F = TypeVar("_F", bound=Callable[..., object])

#: Model type (a substring of ``model.config.model_type``) -> its parser.
MODEL_CONFIGS_TO_MEGATRON_PARSERS: dict[str, Callable[..., object]] = {}


def add_model_config_to_megatron_parser(model_type: str) -> Callable[[_F], _F]:
    """Decorator: register the decorated parser for ``model_type`` and return it unchanged."""

    def register(parser: _F) -> _F:
        MODEL_CONFIGS_TO_MEGATRON_PARSERS[model_type] = parser

        @functools.wraps(parser)
        def wrapper(*args: object, **kwargs: object) -> object:
            return parser(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return register


@add_model_config_to_megatron_parser("megatron-bert")
def parse_bert_config(
    megatron_lm_plugin: MegatronLMPlugin, model: object, batch_data: object
) -> NoReturn:
    """Megatron-LM arguments for a BERT model (out of scope)."""
    raise megatron_out_of_scope("parse_bert_config")


@add_model_config_to_megatron_parser("gpt2")
def parse_gpt2_config(
    megatron_lm_plugin: MegatronLMPlugin, model: object, batch_data: object
) -> NoReturn:
    """Megatron-LM arguments for a GPT-2 model (out of scope)."""
    raise megatron_out_of_scope("parse_gpt2_config")


@add_model_config_to_megatron_parser("t5")
def parse_t5_config(
    megatron_lm_plugin: MegatronLMPlugin, model: object, batch_data: object
) -> NoReturn:
    """Megatron-LM arguments for a T5 model (out of scope)."""
    raise megatron_out_of_scope("parse_t5_config")


@add_model_config_to_megatron_parser("llama")
def parse_llama_config(
    megatron_lm_plugin: MegatronLMPlugin, model: object, batch_data: object
) -> NoReturn:
    """Megatron-LM arguments for a Llama model (out of scope)."""
    raise megatron_out_of_scope("parse_llama_config")


@add_model_config_to_megatron_parser("glm4_moe")
def parse_glm4_moe_config(
    megatron_lm_plugin: MegatronLMPlugin, model: object, batch_data: object
) -> NoReturn:
    """Megatron-LM arguments for a GLM-4 MoE model (out of scope)."""
    raise megatron_out_of_scope("parse_glm4_moe_config")
