"""merge_fsdp_weights: a torch.distributed.checkpoint folder becomes one safetensors or .bin file.

The checkpoints are real: written by ``torch.distributed.checkpoint.save`` in this process, and
by two gloo processes that shard a model with FSDP2 (``fully_shard``), each writing its shards.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file

from accel_backends import merge_fsdp_weights, read_distributed_checkpoint

HERE = Path(__file__)
# dcp.save(no_dist=True) in these tests warns that it saves in one process, which is the intent.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_single_process_checkpoint_merges_to_safetensors(tmp_path: Path):
    model = make_model()
    checkpoint = tmp_path / "pytorch_model_fsdp_0"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(checkpoint), no_dist=True)
    merge_fsdp_weights(str(checkpoint), str(tmp_path / "merged"))
    merged = load_file(tmp_path / "merged" / "model.safetensors")
    assert sorted(merged) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(merged[name], value, rtol=0, atol=0)
    assert checkpoint.is_dir()  # kept unless asked


def test_urls_read_the_shards_from_the_store_and_upload_the_merged_file(tmp_path: Path):
    import fsspec
    from safetensors.torch import load

    model = make_model()
    local = tmp_path / "pytorch_model_fsdp_0"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(local), no_dist=True)
    fs = fsspec.filesystem("memory")
    fs.put(str(local), "/merge-test/pytorch_model_fsdp_0", recursive=True)
    source, target = "memory://merge-test/pytorch_model_fsdp_0", "memory://merge-test/merged"
    try:
        merge_fsdp_weights(source, target, remove_checkpoint_dir=True)
        merged = load(fs.cat_file("/merge-test/merged/model.safetensors"))
        for name, value in model.state_dict().items():
            torch.testing.assert_close(merged[name], value, rtol=0, atol=0)
        assert not fs.exists("/merge-test/pytorch_model_fsdp_0")
        with pytest.raises(ValueError, match="couldn't find a valid metadata file"):
            merge_fsdp_weights("memory://merge-test/nothing", target)
    finally:
        fs.rm("/merge-test", recursive=True)


def test_optimizer_checkpoint_to_bin_keeps_every_entry(tmp_path: Path):
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    state = {"optimizer": optimizer.state_dict(), "step": 7}
    checkpoint = tmp_path / "optimizer_0"
    dcp.save(state, checkpoint_id=str(checkpoint), no_dist=True)
    merge_fsdp_weights(
        str(checkpoint), str(tmp_path / "out"), safe_serialization=False, remove_checkpoint_dir=True
    )
    merged = torch.load(tmp_path / "out" / "pytorch_model.bin", weights_only=True)
    assert merged["step"] == 7  # two top-level sections: nothing is unwrapped
    exp_avg = optimizer.state_dict()["state"][0]["exp_avg"]
    torch.testing.assert_close(merged["optimizer.state.0.exp_avg"], exp_avg, rtol=0, atol=0)
    assert merged["optimizer.param_groups.0.lr"] == 0.01
    assert not checkpoint.exists()


def test_safetensors_leaves_out_what_is_not_a_tensor(tmp_path: Path):
    checkpoint = tmp_path / "ckpt"
    dcp.save({"weight": torch.arange(4.0), "step": 3}, checkpoint_id=str(checkpoint), no_dist=True)
    assert read_distributed_checkpoint(checkpoint)["step"] == 3
    merge_fsdp_weights(str(checkpoint), str(tmp_path / "out"))
    assert list(load_file(tmp_path / "out" / "model.safetensors")) == ["weight"]


def test_a_folder_without_metadata_names_the_checkpoints_inside(tmp_path: Path):
    (tmp_path / "pytorch_model_fsdp_0").mkdir()
    (tmp_path / "optimizer_0").mkdir()
    with pytest.raises(ValueError, match="couldn't find a valid metadata file") as error:
        merge_fsdp_weights(str(tmp_path), str(tmp_path / "out"))
    assert "pytorch_model_fsdp_0" in str(error.value) and "optimizer_0" in str(error.value)
    assert not (tmp_path / "out").exists()


def save_sharded_worker() -> None:
    """Run by each of two processes: shard the model with FSDP2 and save it with DCP."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    model = make_model()
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    state = get_model_state_dict(model)
    local = state["0.weight"].to_local()
    assert local.shape == (4, 6), local.shape  # each rank holds half of the rows
    dcp.save({"model": state}, checkpoint_id=sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.multiprocess
def test_two_process_fsdp2_checkpoint_merges_to_the_full_model(tmp_path: Path):
    from accel_testing import run_workers

    checkpoint = tmp_path / "pytorch_model_fsdp_0"
    run_workers(2, function=f"{HERE}::save_sharded_worker", args=[str(checkpoint)], timeout=180)
    shard_files = sorted(p.name for p in checkpoint.iterdir() if p.suffix == ".distcp")
    assert shard_files == ["__0_0.distcp", "__1_0.distcp"]
    merge_fsdp_weights(str(checkpoint), str(tmp_path / "merged"))
    merged = load_file(tmp_path / "merged" / "model.safetensors")
    expected = make_model().state_dict()
    assert sorted(merged) == sorted(expected)
    for name, value in expected.items():
        torch.testing.assert_close(merged[name], value, rtol=0, atol=0)
    assert os.path.getsize(tmp_path / "merged" / "model.safetensors") > 0
