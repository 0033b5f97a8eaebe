"""Run a model bigger than its CPU budget: sharded safetensors, disk offload, prefetching.

Builds a random-weight Llama (~210 MB of float32 weights), saves it as sharded safetensors with an
index, then loads it into an empty skeleton with ``load_checkpoint_and_dispatch`` under a 100 MB
CPU budget: what does not fit stays on disk, referenced in place (nothing is copied), and is read
layer by layer during the forward pass. Checks that the outputs equal the in-memory model's, with
and without prefetching, and prints timings.

    python examples/big_model_inference.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from accel_bigmodel import init_empty_weights, load_checkpoint_and_dispatch

CONFIG = LlamaConfig(
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=4,
    num_attention_heads=12,
    num_key_value_heads=12,
    vocab_size=16000,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,
)
CPU_BUDGET = 100 * 2**20


def save_sharded(model: torch.nn.Module, folder: Path, shard_bytes: int = 64 * 2**20) -> None:
    """Save ``model`` as ``model-0000i-of-0000n.safetensors`` shards plus their index."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name, tensor in model.state_dict().items():
        size = tensor.numel() * tensor.element_size()
        if shards[-1] and used + size > shard_bytes:
            shards.append({})
            used = 0
        shards[-1][name] = tensor.contiguous()
        used += size
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / name))
        weight_map.update(dict.fromkeys(shard, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def run(folder: Path) -> None:
    torch.manual_seed(0)
    start = time.perf_counter()
    reference = LlamaForCausalLM(CONFIG).eval()
    save_sharded(reference, folder / "checkpoint")
    size = sum(p.stat().st_size for p in (folder / "checkpoint").glob("*.safetensors"))
    print(f"saved a {size / 2**20:.0f} MB checkpoint in {time.perf_counter() - start:.1f} s")
    ids = torch.randint(0, CONFIG.vocab_size, (1, 64))
    with torch.no_grad():
        expected = reference(ids).logits
    del reference

    for prefetch in (False, True):
        offload = folder / f"offload-{'prefetch' if prefetch else 'plain'}"
        start = time.perf_counter()
        with init_empty_weights():
            model = LlamaForCausalLM(CONFIG).eval()
        built = time.perf_counter()
        model = load_checkpoint_and_dispatch(
            model,
            folder / "checkpoint",
            device_map="auto",
            max_memory={"cpu": CPU_BUDGET},
            no_split_module_classes=model._no_split_modules,
            offload_folder=offload,
            prefetch=prefetch,
        )
        loaded = time.perf_counter()
        with torch.no_grad():
            model(ids)  # first pass learns the order of the offloaded layers
            begin = time.perf_counter()
            logits = model(ids).logits
            forward = time.perf_counter() - begin
        placed = sorted(set(model.hf_device_map.values()))
        written = sum(p.stat().st_size for p in offload.glob("*.dat"))
        same = torch.equal(logits, expected)
        print(
            f"prefetch={prefetch!s:5}: build {built - start:.3f} s, load {loaded - built:.3f} s, "
            f"forward {forward:.2f} s, devices {placed}, {written} bytes written to the offload "
            f"folder, output equal to the in-memory model: {same}"
        )
        if not same:
            raise SystemExit("the offloaded model's output differs from the in-memory model's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", help="write the checkpoint here instead of a temporary folder")
    args = parser.parse_args()
    if args.keep:
        folder = Path(args.keep)
        (folder / "checkpoint").mkdir(parents=True, exist_ok=True)
        run(folder)
        return
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "checkpoint").mkdir()
        run(Path(scratch))


if __name__ == "__main__":
    main()
