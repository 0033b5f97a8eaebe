"""Write the two random-weight Llama models of the ecosystem bench with ``save_pretrained``.

Usage: python ecosystem_make.py <folder> <full|quick>. Writes ``<folder>/train`` (the Trainer's
model) and ``<folder>/offload`` (the ``device_map="auto"`` model, safetensors); prints one JSON
line with their sizes in bytes, the offload model's layer count and the CPU budget (bytes) under
which ``device_map="auto"`` keeps the embeddings and ``CPU_LAYERS`` decoder layers on the CPU and
sends the other layers, the final norm and the head to "disk" (the budget also holds a reserve the
size of the largest module, the head, as Accelerate's ``infer_auto_device_map`` keeps one).
"""

import json
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

#: Trainer model: ~1.3M parameters; one step of batch 4 x 128 tokens takes ~100-200 ms on one core.
TRAIN = dict(
    vocab_size=2000,
    hidden_size=128,
    intermediate_size=344,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
)
#: Offload model: full ~200 MB of float32 (8 layers of ~20 MB, embeddings and head of ~20 MB
#: each), quick ~84 MB (4 layers of ~13 MB).
OFFLOAD = {
    "full": dict(
        vocab_size=8000,
        hidden_size=640,
        intermediate_size=1792,
        num_hidden_layers=8,
        num_attention_heads=10,
        num_key_value_heads=10,
    ),
    "quick": dict(
        vocab_size=8000,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
    ),
}

#: Decoder layers that stay on the CPU; the others go to disk.
CPU_LAYERS = {"full": 2, "quick": 1}


def save(folder: Path, sizes: dict, **save_kwargs) -> int:
    """Write a random Llama of these ``sizes`` (``save_pretrained(**save_kwargs)``); its bytes."""
    config = LlamaConfig(
        **sizes,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder, **save_kwargs)
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def budget(sizes: dict, cpu_layers: int) -> int:
    """The CPU budget (bytes) under which ``device_map="auto"`` keeps the embeddings and
    ``cpu_layers`` decoder layers of a float32 model of these ``sizes`` on the CPU."""
    hidden, inter = sizes["hidden_size"], sizes["intermediate_size"]
    layer_bytes = 4 * (4 * hidden * hidden + 3 * hidden * inter + 2 * hidden)
    embedding_bytes = 4 * hidden * sizes["vocab_size"]
    return int(2 * embedding_bytes + (cpu_layers + 0.5) * layer_bytes)


def main() -> None:
    folder, size = Path(sys.argv[1]), sys.argv[2]
    train_bytes = save(folder / "train", TRAIN)
    offload_bytes = save(folder / "offload", OFFLOAD[size])
    sizes = OFFLOAD[size]
    print(
        json.dumps(
            {
                "train_bytes": train_bytes,
                "offload_bytes": offload_bytes,
                "offload_layers": sizes["num_hidden_layers"],
                "cpu_layers": CPU_LAYERS[size],
                "budget": budget(sizes, CPU_LAYERS[size]),
            }
        )
    )


if __name__ == "__main__":
    main()
