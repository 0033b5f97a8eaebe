"""Accelerate's constructor keywords that choose an engine, and what accel does with each.

Hugging Face Accelerate picks DeepSpeed, FSDP, Megatron-LM or tensor parallelism from plugin
objects given to ``Accelerator``; accel picks a :class:`~accel_core.Strategy`. Every keyword is
accepted, so ported calls keep working, and each is checked before the process state is built:

- a plugin keyword an engine's description claims (``plugin_keywords``: DeepSpeed's
  ``deepspeed_plugin`` / ``deepspeed_plugins``, FSDP's ``fsdp_plugin``) chooses that strategy.
  A keyword no installed description claims (its engine is not installed) raises
  ``NotImplementedError`` naming the keyword, the strategies installed and what to install
  (:data:`~accel_core.built_in_engines.ENGINE_HINT`).
- ``torch_tp_plugin`` (Accelerate's deprecated tensor-parallel plugin) is read as
  ``ParallelismConfig(tp_size=plugin.tp_size)``, with Accelerate's ``FutureWarning``
  (:func:`accel_core.parallelism.configured_parallelism`).
- ``megatron_lm_plugin`` and ``mixed_precision="fp8"`` are out of scope:
  :class:`~accel_core.out_of_scope.OutOfScopeError` naming the feature.

Plugins are recognised by the keyword they come in, not by their class, so accel-core imports no
engine.
"""

from __future__ import annotations

from collections.abc import Mapping

from accel_base.engine_description import EngineDescription
from accel_core.built_in_engines import ENGINE_HINT
from accel_core.out_of_scope import out_of_scope
from accel_core.strategies import available_strategies, strategy_descriptions


def _engine_of(keyword: str) -> EngineDescription | None:
    """The installed engine whose description claims the plugin keyword ``keyword``, else None."""
    for description in strategy_descriptions().values():
        if keyword in description.plugin_keywords:
            return description
    return None


def _not_installed(keyword: str) -> NotImplementedError:
    known = ", ".join(repr(n) for n in available_strategies())
    return NotImplementedError(
        f"{keyword} chooses a strategy, and no installed strategy takes {keyword} (installed "
        f"strategies: {known}). {ENGINE_HINT} Or leave {keyword} out: several processes train "
        "with the ddp strategy."
    )


def _article(title: str) -> str:
    """``an`` before a vowel sound (``an FSDP``, ``an XLA``), else ``a``."""
    initialism = title[:2].isupper()
    return "an" if title[0] in ("AEFHILMNORSX" if initialism else "AEIOU") else "a"


def strategy_plugins(given: Mapping[str, object]) -> dict[str, object]:
    """The plugin of each strategy name, for :func:`~accel_core.strategies.resolve_strategy`,
    from the plugin keywords given to the Accelerator (``None``: not given).

    A keyword no installed engine claims is a NotImplementedError saying what to install. Two
    keywords of one engine (``deepspeed_plugin`` and ``deepspeed_plugins``, Accelerate's two
    spellings) are a ValueError, as in Accelerate, and so are the plugins of two engines.
    """
    chosen: dict[str, tuple[str, object]] = {}
    engines: dict[str, EngineDescription] = {}
    for keyword, plugin in given.items():
        if plugin is None:
            continue
        engine = _engine_of(keyword)
        if engine is None:
            raise _not_installed(keyword)
        if engine.name in chosen:
            raise ValueError(
                f"{chosen[engine.name][0]} and {keyword} were both given; pass one of them "
                f"(both give the {engine.title} plugin)."
            )
        chosen[engine.name] = (keyword, plugin)
        engines[engine.name] = engine
    if len(chosen) > 1:
        first, second = (engines[name].title for name in chosen)
        raise ValueError(
            f"{_article(first)} {first} plugin and {_article(second)} {second} plugin were both "
            "given; each chooses a strategy, pass one of them."
        )
    return {name: plugin for name, (_, plugin) in chosen.items()}


def refuse_out_of_scope(megatron_lm_plugin: object, mixed_precision: object) -> None:
    """Raise OutOfScopeError for Megatron-LM and FP8 mixed precision."""
    if megatron_lm_plugin is not None:
        raise out_of_scope(
            "Megatron-LM (megatron_lm_plugin)",
            "train with the ddp strategy, or with a strategy of accel-backends",
        )
    if str(getattr(mixed_precision, "value", mixed_precision)).lower() == "fp8":
        raise out_of_scope('FP8 training (mixed_precision="fp8")', 'use "bf16" or "fp16"')
