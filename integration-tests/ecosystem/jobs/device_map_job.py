"""``from_pretrained`` with device maps, CPU and disk offload; the same file runs under Hugging Face
Accelerate and under accel's ``accelerate`` alias (transformers calls it to place the weights).

    device_map_job.py MODEL OUT

Loads the model once plainly, then once per case in :data:`CASES`, and writes the logits of one
fixed batch for each to ``OUT/logits.safetensors`` (key: the case) and, to ``OUT/maps.json``, each
case's ``hf_device_map`` and the module of the hook on the last decoder layer.
"""

from __future__ import annotations

import json
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
}


def logits(model) -> torch.Tensor:
    ids = torch.tensor([[2, 5, 9, 14, 20, 27, 33, 41], [2, 44, 38, 30, 21, 11, 6, 3]])
    with torch.no_grad():
        return model(input_ids=ids).logits.contiguous()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    found = {"plain": logits(AutoModelForCausalLM.from_pretrained(MODEL))}
    maps = {}
    for name, options in CASES.items():
        model = AutoModelForCausalLM.from_pretrained(
            MODEL, offload_folder=str(OUT / f"offload-{name}"), **options
        )
        found[name] = logits(model)
        hook = getattr(model.model.layers[-1], "_hf_hook", None)
        maps[name] = {
            "device_map": model.hf_device_map,
            "hook": f"{type(hook).__module__}.{type(hook).__qualname__}",
        }
    save_file(found, str(OUT / "logits.safetensors"))
    (OUT / "maps.json").write_text(json.dumps(maps, indent=1))


if __name__ == "__main__":
    main()
