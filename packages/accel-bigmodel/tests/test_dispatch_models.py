"""Dispatched and offloaded transformers models give the plain model's outputs, bit for bit."""

import pytest
import torch
from bigmodel_helpers import (
    bert_config,
    dir_bytes,
    gpt2_config,
    llama_config,
    save_sharded,
    unique_state_dict,
)
from safetensors.torch import save_file

from accel_bigmodel import (
    dispatch_model,
    find_tied_parameters,
    init_empty_weights,
    load_checkpoint_and_dispatch,
)


def _build(kind: str, empty: bool = False):
    from transformers import BertModel, GPT2LMHeadModel, LlamaForCausalLM

    cls, config = {
        "gpt2": (GPT2LMHeadModel, gpt2_config),
        "llama": (LlamaForCausalLM, llama_config),
        "bert": (BertModel, bert_config),
    }[kind]
    if empty:
        with init_empty_weights():
            return cls(config()).eval()
    torch.manual_seed(0)
    return cls(config()).eval()


def _output(model, ids):
    with torch.no_grad():
        out = model(ids)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """For each architecture: the folder of a sharded safetensors checkpoint and the reference."""
    root = tmp_path_factory.mktemp("ckpt")
    result = {}
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    for kind in ("gpt2", "llama", "bert"):
        model = _build(kind)
        save_sharded(unique_state_dict(model), root / kind, max_shard_bytes=40_000)
        result[kind] = (root / kind, _output(model, ids), ids, model)
    return result


# CPU budgets (bytes) giving each placement; the biggest layer is 50816 (gpt2), 37120 (llama),
# 34176 (bert) bytes and must fit next to what stays on the CPU.
PLACEMENTS = {
    "cpu": {"gpt2": 10**9, "llama": 10**9, "bert": 10**9},
    "cpu+disk": {"gpt2": 80_000, "llama": 60_000, "bert": 70_000},
    "disk": {"gpt2": 51_816, "llama": 38_120, "bert": 35_176},
}


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize(
    "prefetch", [False, None, True], ids=["no-prefetch", "read-ahead-hint", "prefetch"]
)
def test_outputs_equal_plain_model(checkpoints, tmp_path, kind, placement, prefetch, monkeypatch):
    folder, expected, ids, _ = checkpoints[kind]
    monkeypatch.setenv("ACCEL_OFFLOAD_PREFETCH", "advise")  # what prefetch=None follows
    model = _build(kind, empty=True)
    model = load_checkpoint_and_dispatch(
        model,
        folder,
        device_map="auto",
        max_memory={"cpu": PLACEMENTS[placement][kind]},
        no_split_module_classes=model._no_split_modules,
        offload_folder=tmp_path / "offload",
        prefetch=prefetch,
    )
    devices = set(model.hf_device_map.values())
    assert devices == {"cpu": {"cpu"}, "cpu+disk": {"cpu", "disk"}, "disk": {"disk"}}[placement]
    assert torch.equal(_output(model, ids), expected)
    assert torch.equal(_output(model, ids), expected)  # the second pass too (weights re-read)
    # offloaded weights were referenced in the safetensors shards, never copied
    assert dir_bytes(tmp_path / "offload") == 0
    if prefetch and placement != "cpu":
        assert model._accel_prefetcher.hits > 0
    if prefetch is None and placement != "cpu":  # the kernel's read-ahead only
        assert model._accel_prefetcher.threaded is False and model._accel_prefetcher.hits == 0


def test_tied_weights_stay_tied(checkpoints, tmp_path):
    folder, expected, ids, _ = checkpoints["gpt2"]
    model = _build("gpt2", empty=True)
    model = load_checkpoint_and_dispatch(model, folder, device_map={"": "cpu"})
    assert model.lm_head.weight is model.transformer.wte.weight
    assert find_tied_parameters(model) == [["lm_head.weight", "transformer.wte.weight"]]
    model = _build("gpt2", empty=True)
    device_map = {"transformer.wte": "cpu", "lm_head": "cpu", "transformer.wpe": "cpu"}
    device_map |= {"transformer.h": "disk", "transformer.ln_f": "disk", "transformer.drop": "cpu"}
    model = load_checkpoint_and_dispatch(
        model, folder, device_map=device_map, offload_folder=tmp_path / "off"
    )
    assert model.lm_head.weight is model.transformer.wte.weight
    assert torch.equal(_output(model, ids), expected)


def test_tied_weights_on_disk_read_from_one_entry(checkpoints, tmp_path):
    folder, expected, ids, _ = checkpoints["gpt2"]
    model = _build("gpt2", empty=True)
    model = load_checkpoint_and_dispatch(
        model, folder, device_map={"": "disk"}, offload_folder=tmp_path / "off"
    )
    import json

    index = json.loads((tmp_path / "off" / "index.json").read_text())
    assert index["lm_head.weight"] == index["transformer.wte.weight"]
    assert torch.equal(_output(model, ids), expected)


def test_dispatch_of_a_materialised_model_writes_dat_copies(tmp_path):
    model = _build("llama")
    ids = torch.randint(0, 128, (1, 8))
    expected = _output(model, ids)
    device_map = {"model.embed_tokens": "cpu", "model.layers": "disk", "model.norm": "cpu"}
    device_map |= {"model.rotary_emb": "cpu", "lm_head": "disk"}
    model = dispatch_model(model, device_map, offload_dir=tmp_path)
    assert model.hf_device_map == device_map
    assert model.model.layers[0].self_attn.q_proj.weight.device.type == "meta"
    assert (tmp_path / "model.layers.0.self_attn.q_proj.weight.dat").exists()
    assert torch.equal(_output(model, ids), expected)


def test_bin_checkpoint_and_dtype(tmp_path):
    model = _build("bert")
    ids = torch.randint(0, 128, (1, 8))
    save_sharded(model.state_dict(), tmp_path / "bin", 30_000, suffix="bin")
    expected = _output(model, ids)
    empty = _build("bert", empty=True)
    empty = load_checkpoint_and_dispatch(
        empty,
        tmp_path / "bin",
        device_map={"embeddings": "cpu", "encoder": "disk", "pooler": "cpu"},
        offload_folder=tmp_path / "off",
    )
    assert torch.equal(_output(empty, ids), expected)
    assert dir_bytes(tmp_path / "off") > 0  # .bin tensors cannot be referenced: copied
    half = _build("bert", empty=True)
    half = load_checkpoint_and_dispatch(
        half, tmp_path / "bin", device_map={"": "cpu"}, dtype=torch.bfloat16
    )
    assert half.encoder.layer[0].output.dense.weight.dtype == torch.bfloat16
    assert torch.allclose(_output(half, ids).float(), expected, atol=0.1)


def test_single_file_and_index_path(tmp_path):
    model = _build("llama")
    ids = torch.randint(0, 128, (1, 8))
    expected = _output(model, ids)
    save_file(unique_state_dict(model), str(tmp_path / "weights.safetensors"))
    empty = load_checkpoint_and_dispatch(
        _build("llama", empty=True), tmp_path / "weights.safetensors", device_map={"": "cpu"}
    )
    assert torch.equal(_output(empty, ids), expected)
    save_sharded(unique_state_dict(model), tmp_path / "sharded", 20_000)
    index = tmp_path / "sharded" / "model.safetensors.index.json"
    again = load_checkpoint_and_dispatch(_build("llama", empty=True), index, device_map="auto")
    assert torch.equal(_output(again, ids), expected)


def test_an_index_without_weight_map_loads_as_in_accelerate(tmp_path):
    import json

    from accel_bigmodel import load_checkpoint_in_model

    model = _build("llama")
    ids = torch.randint(0, 128, (1, 8))
    expected = _output(model, ids)
    save_sharded(unique_state_dict(model), tmp_path, 20_000)
    index = tmp_path / "model.safetensors.index.json"
    bare = json.loads(index.read_text())["weight_map"]  # the bare name -> file mapping
    index.write_text(json.dumps(bare))
    empty = _build("llama", empty=True)
    load_checkpoint_in_model(empty, index, device_map={"": "cpu"})
    assert torch.equal(_output(empty, ids), expected)
