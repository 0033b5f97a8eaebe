"""Shared helpers for the accel-bigmodel tests: tiny transformers models and checkpoint writers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without the second name of tied tensors (as safetensors requires)."""
    seen: set[int] = set()
    result = {}
    for name, tensor in model.state_dict().items():
        key = tensor.untyped_storage().data_ptr()
        if key in seen and tensor.numel() > 0:
            continue
        seen.add(key)
        result[name] = tensor.detach().contiguous()
    return result


def save_sharded(
    state: dict[str, torch.Tensor], folder: Path, max_shard_bytes: int, suffix: str = "safetensors"
) -> list[Path]:
    """Write ``state`` as shards of at most ``max_shard_bytes`` and an index; return the shards."""
    folder.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    weight_map = {}
    paths = []
    for i, shard in enumerate(shards):
        base = "model" if suffix == "safetensors" else "pytorch_model"
        path = folder / f"{base}-{i + 1:05d}-of-{len(shards):05d}.{suffix}"
        if suffix == "safetensors":
            save_file(shard, str(path))
        else:
            torch.save(shard, path)
        paths.append(path)
        weight_map.update(dict.fromkeys(shard, path.name))
    index_name = (
        "model.safetensors.index.json"
        if suffix == "safetensors"
        else "pytorch_model.bin.index.json"
    )
    (folder / index_name).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return paths


def gpt2_config(layers: int = 3):
    from transformers import GPT2Config

    return GPT2Config(
        n_embd=32,
        n_layer=layers,
        n_head=4,
        vocab_size=128,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )


def llama_config(layers: int = 3):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
    )


def bert_config(layers: int = 2):
    from transformers import BertConfig

    return BertConfig(
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=64,
    )


def dir_bytes(folder: Path, pattern: str = "*.dat") -> int:
    return sum(p.stat().st_size for p in Path(folder).glob(pattern))
