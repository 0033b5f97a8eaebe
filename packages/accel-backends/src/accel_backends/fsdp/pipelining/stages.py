"""The part of a model one pipeline stage keeps.

``split_fn(model, stage_index, num_stages)`` (the user's, or :func:`split_causal_lm`) returns a
module made of the model's own sub-modules that computes the stage. :func:`keep_stage` then
prunes, in place, every sub-module of ``model`` holding weights the stage does not use (it
becomes None in its parent, as an absent optional layer is) and makes ``model``'s forward the
stage's. So the prepared model is the user's model object, holding the stage's parameters under
the names they had in the whole model (``model.layers.2.mlp.up_proj.weight`` on the second of
two stages of a 4-layer model): state dicts and checkpoints of the stages are pieces of the
whole model's, which load on another number of stages or as one process.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from itertools import chain

import torch

from accel_backends.pipeline_config import SplitFn


def _tensors(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    return chain(module.parameters(), module.buffers())


class StageForward:
    """``model.forward`` of a pruned model: calls the stage module (through ``__call__``, so the
    hooks of its sub-modules, FSDP2's among them, run), only while a schedule runs it
    (``running``): called on its own, a stage would return its part of the computation (hidden
    states on the first stage) where the whole model's outputs are expected."""

    def __init__(self, stage: torch.nn.Module, stage_index: int, num_stages: int) -> None:
        self.stage = stage
        self.where = f"stage {stage_index} of {num_stages}"
        self.running = False

    def __call__(self, *args: object, **kwargs: object) -> object:
        if not self.running:
            raise RuntimeError(
                f"this process holds {self.where} of the model (pipeline parallelism): the "
                "model runs only through accelerator.forward_backward(model, inputs, loss_fn, "
                "target). Evaluating or generating under pp_size > 1 is not built in accel: "
                "load the checkpoint (save_state, or save_model's files) without pp_size"
            )
        return self.stage(*args, **kwargs)


def keep_stage(
    model: torch.nn.Module, split_fn: SplitFn, stage_index: int, num_stages: int
) -> torch.nn.Module:
    """Prune ``model`` in place to stage ``stage_index`` of ``num_stages`` as ``split_fn`` says,
    and return it (its forward runs the stage).

    Raises:
        TypeError: ``split_fn`` returned something other than a module.
        ValueError: the stage holds tensors that are not ``model``'s (copies), holds no parameter,
            or leaves a parameter of ``model`` that it does not use inside a module it keeps
            (split along module boundaries).
    """
    stage = split_fn(model, stage_index, num_stages)
    if not isinstance(stage, torch.nn.Module):
        raise TypeError(
            f"split_fn(model, {stage_index}, {num_stages}) returned {type(stage).__name__}; it "
            "must return the stage's torch.nn.Module, made of the model's own sub-modules"
        )
    own = {id(t) for t in _tensors(model)}
    used = {id(t) for t in _tensors(stage)}
    if used - own:
        raise ValueError(
            f"the module split_fn returned for stage {stage_index} holds "
            f"{len(used - own)} tensor(s) that are not the model's: build the stage from the "
            "model's own sub-modules (not copies), so that the optimizer and the checkpoints "
            "follow them"
        )
    if not any(True for _ in stage.parameters()):
        raise ValueError(
            f"stage {stage_index} of {num_stages} holds no parameter: give every stage a part "
            "of the model with weights (fewer stages, or another split)"
        )
    dropped = list(_unused_children(model, used, ""))
    gone = tuple(f"{prefix}." for _, _, prefix in dropped)
    unused = [
        name
        for name, p in model.named_parameters()
        if id(p) not in used and not f"{name}.".startswith(gone)
    ]
    if unused:
        raise ValueError(
            f"stage {stage_index} keeps modules holding parameters it does not use "
            f"({', '.join(unused[:5])}): split the model along module boundaries, so that each "
            "stage uses every parameter of the modules it holds"
        )
    for parent, name, _ in dropped:
        parent.register_module(name, None)
    model.forward = StageForward(stage, stage_index, num_stages)  # type: ignore[method-assign]
    return model


def _unused_children(
    module: torch.nn.Module, used: set[int], prefix: str
) -> Iterator[tuple[torch.nn.Module, str, str]]:
    """``(parent, name, qualified name)`` of each outermost sub-module holding weights none of
    which ``used`` has."""
    for name, child in module.named_children():
        qualified = f"{prefix}{name}"
        held = [id(t) for t in _tensors(child)]
        if not held:
            continue  # an activation or the like: nothing to keep or to drop
        if not any(key in used for key in held):
            yield module, name, qualified
        else:
            yield from _unused_children(child, used, f"{qualified}.")


def even_layers(num_layers: int, stage_index: int, num_stages: int) -> range:
    """The layers stage ``stage_index`` runs when ``num_layers`` are split evenly (the first
    stages take one more when they don't divide)."""
    if num_layers < num_stages:
        raise ValueError(
            f"{num_layers} layers can't be split into {num_stages} pipeline stages: each stage "
            "needs at least one layer (lower pp_size)"
        )
    base, extra = divmod(num_layers, num_stages)
    start = stage_index * base + min(stage_index, extra)
    return range(start, start + base + (1 if stage_index < extra else 0))


class CausalLMStage(torch.nn.Module):
    """One stage of a transformers causal LM (``model.model.layers``, ``embed_tokens``,
    ``rotary_emb``, ``norm``, ``lm_head``): the first stage takes ``input_ids`` and embeds them,
    every stage runs its decoder layers with a causal mask and rotary positions ``0..seq-1``,
    the last applies the final norm and ``lm_head`` and returns the logits."""

    def __init__(self, model: torch.nn.Module, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        base = model.model  # type: ignore[union-attr]
        self.config = model.config  # type: ignore[union-attr]
        self.embed_tokens = base.embed_tokens if first else None
        self.layers = torch.nn.ModuleList(base.layers[i] for i in layers)
        self.rotary_emb = base.rotary_emb
        self.norm = base.norm if last else None
        self.lm_head = model.lm_head if last else None

    def forward(
        self, hidden_states: torch.Tensor | None = None, input_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask

        if self.embed_tokens is not None:
            if input_ids is None:
                raise ValueError(
                    "the first stage of a causal LM takes input_ids: call "
                    "accelerator.forward_backward(model, {'input_ids': ids}, loss_fn, labels)"
                )
            hidden_states = self.embed_tokens(input_ids)
        assert hidden_states is not None
        position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None]
        # transformers renamed the cache argument between releases (``past_key_values`` and
        # ``cache_position`` in 5.23, ``cache`` in 5.25): give the ones this release takes
        offered = {
            "config": self.config,
            "inputs_embeds": hidden_states,
            "input_embeds": hidden_states,
            "attention_mask": None,
            "cache": None,
            "past_key_values": None,
            "cache_position": position_ids[0],
            "position_ids": position_ids,
        }
        accepted = inspect.signature(create_causal_mask).parameters
        mask = create_causal_mask(**{k: v for k, v in offered.items() if k in accepted})
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
            )
        if self.lm_head is not None and self.norm is not None:
            return self.lm_head(self.norm(hidden_states))
        return hidden_states


def split_causal_lm(model: torch.nn.Module, stage_index: int, num_stages: int) -> torch.nn.Module:
    """The stage of a transformers causal LM: its decoder layers split evenly, the embeddings on
    the first stage, the final norm and ``lm_head`` on the last.

    Raises ``ValueError`` for a model without that layout, or one whose ``lm_head`` shares its
    weight with the embeddings (``tie_word_embeddings``: the first and last stage would both
    hold it)."""
    base = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "rotary_emb", "norm")
    if base is None or not hasattr(model, "lm_head") or not all(hasattr(base, n) for n in needed):
        raise ValueError(
            f"{type(model).__name__} is not split by accel: without a split_fn, pipeline "
            "parallelism takes a transformers causal LM (model.model.embed_tokens, .layers, "
            ".rotary_emb, .norm and model.lm_head); pass ParallelismConfig(pp_handler="
            "PipelineParallelConfig(split_fn=fn)) with fn(model, stage_index, num_stages) "
            "returning the stage's module"
        )
    if num_stages > 1 and model.lm_head.weight is base.embed_tokens.weight:
        raise ValueError(
            f"{type(model).__name__} ties lm_head to the input embeddings "
            "(tie_word_embeddings=True), which the first and the last pipeline stage would both "
            "hold: load it with tie_word_embeddings=False for pipeline parallelism"
        )
    layers = even_layers(len(base.layers), stage_index, num_stages)
    return CausalLMStage(model, layers, stage_index == 0, stage_index == num_stages - 1)
