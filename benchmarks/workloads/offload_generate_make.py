"""Write the random-weight Llama of the offloaded-generate bench with ``save_pretrained``, sharded.

Usage: python offload_generate_make.py <folder> <full|quick>. Writes a float32 safetensors
checkpoint in several shards (full: 10 layers, hidden 640, ~244 MB in 50 MB shards; quick: 4 layers,
hidden 512, ~84 MB in 20 MB shards) and prints one JSON line: the checkpoint's bytes and shard
count, the decoder layer count and two CPU budgets (bytes, see ``ecosystem_make.budget``):
``disk_budget`` keeps only the embeddings on the CPU (every decoder layer, the final norm and the
head go to "disk"), ``split_budget`` keeps the embeddings and half of the decoder layers.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ecosystem_make import OFFLOAD, budget, save

SIZES = {"full": {**OFFLOAD["full"], "num_hidden_layers": 10}, "quick": OFFLOAD["quick"]}
SHARD = {"full": "50MB", "quick": "20MB"}


def main() -> None:
    folder, size = Path(sys.argv[1]), sys.argv[2]
    sizes = SIZES[size]
    total = save(folder, sizes, max_shard_size=SHARD[size])
    layers = sizes["num_hidden_layers"]
    print(
        json.dumps(
            {
                "bytes": total,
                "shards": len(list(folder.glob("*.safetensors"))),
                "layers": layers,
                "disk_budget": budget(sizes, 0),
                "split_budget": budget(sizes, layers // 2),
            }
        )
    )


if __name__ == "__main__":
    main()
