"""``from_pretrained`` with device maps, CPU and disk offload; the same file runs under Hugging Face
Accelerate and under accel's ``accelerate`` alias (transformers calls it to place the weights).

    device_map_job.py MODEL OUT

Loads the model once plainly, then once per case in :data:`CASES`, and writes the logits of one
fixed batch for each to ``OUT/logits.safetensors`` (key: the case) and, to ``OUT/maps.json``, each
case's ``hf_device_map``, the module of the hook on the last decoder layer and the tokens of a
greedy ``generate`` (every generated token runs every offloaded layer again). The cases cover CPU
and disk offload, offloaded buffers, each prefetch setting of accel (``ACCEL_OFFLOAD_PREFETCH``,
set before the load; Accelerate ignores it) and a model with tied input and output embeddings
(``tied_plain`` is its in-memory load).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

MODEL, OUT = Path(sys.argv[1]), Path(sys.argv[2])
#: The model holds 323 kB of float32 weights, 148 kB per decoder layer. Under 310 kB of CPU memory
#: (of which transformers keeps the largest layer's size free, to bring back an offloaded layer) the
#: embeddings and the first layer stay on the CPU, the rest goes to disk.
EXPLICIT = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.norm": "disk",
    "lm_head": "cpu",
}
CASES = {
    "max_memory_text": {"device_map": "auto", "max_memory": {"cpu": "310KB"}},
    "max_memory_int": {"device_map": "auto", "max_memory": {"cpu": 310_000}},
    "offload_buffers": {
        "device_map": "auto",
        "max_memory": {"cpu": "310KB"},
        "offload_buffers": True,
    },
    "explicit_map": {"device_map": EXPLICIT},
    "prefetch_thread": {"device_map": "auto", "max_memory": {"cpu": "310KB"}},
    "prefetch_off": {"device_map": "auto", "max_memory": {"cpu": "310KB"}},
    "prefetch_advise": {"device_map": "auto", "max_memory": {"cpu": "310KB"}},
    "tied_disk": {"device_map": "auto", "max_memory": {"cpu": "200KB"}},
}
#: ACCEL_OFFLOAD_PREFETCH for the cases that set it (unset for the others: accel's default).
PREFETCH = {"prefetch_thread": "thread", "prefetch_advise": "advise", "prefetch_off": "0"}
NEW_TOKENS = 6


def logits(model) -> torch.Tensor:
    ids = torch.tensor([[2, 5, 9, 14, 20, 27, 33, 41], [2, 44, 38, 30, 21, 11, 6, 3]])
    with torch.no_grad():
        return model(input_ids=ids).logits.contiguous()


def generated(model) -> list[int]:
    ids = torch.tensor([[2, 5, 9, 14]])
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
        )
    return out[0, ids.shape[1] :].tolist()


def tied_copy(folder: Path) -> Path:
    """The model with its output embedding tied to the input one, saved to ``folder``."""
    model = AutoModelForCausalLM.from_pretrained(MODEL)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    model.save_pretrained(folder)
    return folder


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    plain = AutoModelForCausalLM.from_pretrained(MODEL)
    found = {"plain": logits(plain)}
    tokens = {"plain": generated(plain)}
    tied = tied_copy(OUT / "tied-model")
    tied_plain = AutoModelForCausalLM.from_pretrained(tied)
    assert tied_plain.lm_head.weight is tied_plain.model.embed_tokens.weight
    found["tied_plain"], tokens["tied_plain"] = logits(tied_plain), generated(tied_plain)
    maps = {}
    for name, options in CASES.items():
        os.environ.pop("ACCEL_OFFLOAD_PREFETCH", None)
        if name in PREFETCH:
            os.environ["ACCEL_OFFLOAD_PREFETCH"] = PREFETCH[name]
        model = AutoModelForCausalLM.from_pretrained(
            tied if name.startswith("tied") else MODEL,
            offload_folder=str(OUT / f"offload-{name}"),
            **options,
        )
        found[name] = logits(model)
        tokens[name] = generated(model)
        hook = getattr(model.model.layers[-1], "_hf_hook", None)
        prefetcher = getattr(model, "_accel_prefetcher", None)
        maps[name] = {
            "device_map": model.hf_device_map,
            "hook": f"{type(hook).__module__}.{type(hook).__qualname__}",
            "prefetch": None
            if prefetcher is None
            else ("thread" if prefetcher.threaded else "advise"),
        }
    (OUT / "tokens.json").write_text(json.dumps(tokens))
    save_file(found, str(OUT / "logits.safetensors"))
    (OUT / "maps.json").write_text(json.dumps(maps, indent=1))


if __name__ == "__main__":
    main()
