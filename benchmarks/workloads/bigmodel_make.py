"""Write a random-weight Llama checkpoint as sharded safetensors (+ index) for the big-model bench.

Usage: python bigmodel_make.py <folder> <full|quick>. Prints one JSON line with the sizes.
"""

import json
import os
import sys
from pathlib import Path

import torch
from raw_shards import plan_raw_shards
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

SIZES = {
    # ~1.9 GB of float32: 8 layers of 206 MB, embeddings and head of 131 MB each
    "full": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, vocab_size=16000),
    # ~170 MB
    "quick": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, vocab_size=8000),
}


def config_for(size: str) -> LlamaConfig:
    heads = SIZES[size]["hidden_size"] // 128
    return LlamaConfig(
        **SIZES[size],
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
    )


def main() -> None:
    folder, size = Path(sys.argv[1]), sys.argv[2]
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    with torch.no_grad():
        model = LlamaForCausalLM(config_for(size))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    limit = 500 * 10**6 if size == "full" else 50 * 10**6
    weight_map = {}
    for name, shard in plan_raw_shards(state, limit):
        save_file(shard, str(folder / name))
        weight_map.update(dict.fromkeys(shard, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    files = list(folder.glob("*.safetensors"))
    print(
        json.dumps(
            {
                "bytes": sum(os.path.getsize(f) for f in files),
                "largest_shard": max(os.path.getsize(f) for f in files),
                "shards": len(files),
            }
        )
    )


if __name__ == "__main__":
    main()
