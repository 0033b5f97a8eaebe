"""What accel-core's ``save_model`` writes, accel-bigmodel loads: one file and sharded, safetensors
and ``torch.save``, tied weights tied again, into a fresh model and into an empty skeleton.
"""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator, init_empty_weights, load_checkpoint_and_dispatch
from accel import load_checkpoint_in_model as load_in_model


class TiedLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
        self.head = torch.nn.Linear(16, 64, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("positions", torch.arange(10.0))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids) + self.positions[: len(ids), None]
        return self.head(self.blocks(hidden))


def built(seed: int) -> TiedLM:
    torch.manual_seed(seed)
    return TiedLM()


@pytest.mark.parametrize("safe_serialization", [True, False], ids=["safetensors", "torch.save"])
@pytest.mark.parametrize("max_shard_size", ["10GB", "2KB"], ids=["one-file", "sharded"])
def test_accel_bigmodel_loads_what_save_model_wrote(max_shard_size, safe_serialization, tmp_path):
    model = built(seed=0)
    accelerator = Accelerator(cpu=True)
    accelerator.save_model(
        model, tmp_path, max_shard_size=max_shard_size, safe_serialization=safe_serialization
    )
    shards = sorted(p.name for p in tmp_path.iterdir() if "-of-" in p.name)
    assert (len(shards) > 1) == (max_shard_size == "2KB")
    expected = model(torch.arange(5)).detach()

    fresh = built(seed=1)
    load_in_model(fresh, tmp_path, strict=True)
    assert fresh.head.weight is fresh.embed.weight
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name

    with init_empty_weights():
        skeleton = TiedLM()
    skeleton = load_checkpoint_and_dispatch(skeleton, tmp_path, device_map={"": "cpu"})
    assert skeleton.head.weight is skeleton.embed.weight
    assert torch.equal(skeleton(torch.arange(5)), expected)


@pytest.mark.parametrize("offload", ["cpu", "disk"])
def test_save_model_of_an_offloaded_model_writes_its_full_weights(offload, tmp_path):
    """As Accelerate's: the offloaded blocks are brought in one by one and saved."""
    from safetensors.torch import load_file

    from accel import cpu_offload, disk_offload

    model = built(seed=0)
    expected = {name: value.clone() for name, value in model.state_dict().items()}
    if offload == "cpu":
        cpu_offload(model, execution_device="cpu")
    else:
        disk_offload(model, tmp_path / "offload", execution_device="cpu")
    assert model.blocks[0].weight.is_meta  # the weights live in the offload store
    Accelerator(cpu=True).save_model(model, tmp_path / "saved")
    saved = load_file(tmp_path / "saved" / "model.safetensors")
    tied = {"head.weight", "embed.weight"}  # saved once while they share storage (cpu offload)
    assert set(saved) - tied == set(expected) - tied and set(saved) & tied
    for name, value in saved.items():
        assert torch.equal(value, expected[name]), name
