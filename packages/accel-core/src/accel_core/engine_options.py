"""Accelerate's constructor keywords that choose an engine, and what accel does with each.

Hugging Face Accelerate picks DeepSpeed, FSDP, Megatron-LM or tensor parallelism from plugin
objects given to ``Accelerator``; accel picks a :class:`~accel_core.Strategy`. Every keyword is
accepted, so ported calls keep working, and each is checked before the process state is built:

- ``deepspeed_plugin`` / ``deepspeed_plugins`` and ``fsdp_plugin`` choose the strategy of that
  name when one is registered (accel-backends provides them). Until it is, they raise
  ``NotImplementedError`` saying so and naming the strategies installed.
- ``megatron_lm_plugin``, ``torch_tp_plugin`` and ``mixed_precision="fp8"`` are out of scope:
  :class:`~accel_core.out_of_scope.OutOfScopeError` naming the feature.

Plugins are recognised by the keyword they come in, not by their class, so accel-core does not
import accel-backends.
"""

from __future__ import annotations

from collections.abc import Mapping

from accel_core.out_of_scope import out_of_scope
from accel_core.strategies import available_strategies

#: Strategy name -> how users name its engine.
_ENGINES = {"deepspeed": "DeepSpeed", "fsdp": "FSDP"}


def strategy_plugins(
    deepspeed_plugin: object,
    deepspeed_plugins: object,
    fsdp_plugin: object,
) -> Mapping[str, object]:
    """The plugin of each strategy name, for :func:`~accel_core.strategies.resolve_strategy`.

    ``deepspeed_plugins`` (a plugin, or a dict of named plugins) is Accelerate's other spelling
    of ``deepspeed_plugin``; giving both is a ValueError, as in Accelerate, and so is giving a
    DeepSpeed and an FSDP plugin together.
    """
    if deepspeed_plugin is not None and deepspeed_plugins is not None:
        raise ValueError(
            "deepspeed_plugin and deepspeed_plugins were both given; pass one of them "
            "(deepspeed_plugins also takes a dict of named plugins)."
        )
    deepspeed = deepspeed_plugins if deepspeed_plugins is not None else deepspeed_plugin
    if deepspeed is not None and fsdp_plugin is not None:
        raise ValueError(
            "a DeepSpeed plugin and an FSDP plugin were both given; each chooses a strategy, "
            "pass one of them."
        )
    plugins = {"deepspeed": deepspeed, "fsdp": fsdp_plugin}
    installed = available_strategies()
    for name, plugin in plugins.items():
        if plugin is not None and name not in installed:
            engine = _ENGINES[name]
            known = ", ".join(repr(n) for n in installed)
            raise NotImplementedError(
                f"a {engine} plugin chooses the {name!r} strategy, and accel-backends does not "
                f"provide the {engine} strategy yet (installed strategies: {known}). Until it "
                f"does, leave the {engine} plugin out: several processes train with the ddp "
                "strategy."
            )
    return plugins


def refuse_out_of_scope(
    megatron_lm_plugin: object,
    torch_tp_plugin: object,
    mixed_precision: object,
) -> None:
    """Raise OutOfScopeError for Megatron-LM, tensor parallelism and FP8 mixed precision."""
    if megatron_lm_plugin is not None:
        raise out_of_scope(
            "Megatron-LM (megatron_lm_plugin)",
            "train with the ddp strategy, or with DeepSpeed or FSDP once accel-backends has them",
        )
    if torch_tp_plugin is not None:
        raise out_of_scope(
            "Tensor parallelism (torch_tp_plugin)",
            "leave torch_tp_plugin out: accel trains with data parallelism (the ddp strategy)",
        )
    if str(getattr(mixed_precision, "value", mixed_precision)).lower() == "fp8":
        raise out_of_scope('FP8 training (mixed_precision="fp8")', 'use "bf16" or "fp16"')
