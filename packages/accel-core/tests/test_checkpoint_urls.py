"""Checkpoints at a URL, one process, on fsspec's ``memory://`` filesystem (an object store with
no rename, in this process): what is stored, rotation, the latest complete checkpoint, refusals
before anything is written. The S3 server tests (real processes) are in
integration-tests/storage."""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import fsspec
import pytest
import torch

from accel_core import Accelerator, ProjectConfiguration
from accel_core.checkpointing import CheckpointError
from accel_core.checkpointing.object_storage import staging_folder


class MemoryFolder(NamedTuple):
    """A folder on the memory filesystem: its URL, the filesystem, its path there."""

    url: str
    fs: Any
    root: str


@pytest.fixture
def memory() -> Iterator[MemoryFolder]:
    """A fresh folder on the memory filesystem."""
    fs = fsspec.filesystem("memory")
    folder = f"/accel-{uuid.uuid4().hex[:8]}"
    yield MemoryFolder(f"memory://{folder}", fs, folder)
    if fs.exists(folder):
        fs.rm(folder, recursive=True)


def _names(paths: Iterable[str]) -> list[str]:
    """The last parts of ``paths``, sorted."""
    return sorted(str(path).rsplit("/", 1)[1] for path in paths)


@pytest.fixture
def in_empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty working folder (a URL must never become a local folder there), with the
    staging folders under it."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("ACCEL_STAGING_DIR", str(tmp_path / "staging"))
    return work


def _train(project: str | None = None, limit: int | None = None):
    config = ProjectConfiguration(
        project_dir=project, automatic_checkpoint_naming=project is not None, total_limit=limit
    )
    accelerator = Accelerator(project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.ones(2, 4)).pow(2).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_url_checkpoint_holds_the_same_bytes_as_a_local_one(
    memory: MemoryFolder, in_empty_folder: Path, tmp_path: Path
) -> None:
    url, fs, root = memory
    accelerator, model, optimizer = _train()
    _step(model, optimizer)
    assert accelerator.save_state(f"{url}/step1") == f"{url}/step1"
    accelerator.save_state(tmp_path / "local")
    stored = _names(fs.find(f"{root}/step1"))
    assert stored == sorted(os.listdir(tmp_path / "local"))
    for name in ("model.safetensors", "optimizer.bin"):
        remote = fs.cat_file(f"{root}/step1/{name}")
        assert remote == (tmp_path / "local" / name).read_bytes(), name
    assert os.listdir(in_empty_folder) == []  # no local folder named "memory:"
    assert not staging_folder_exists(in_empty_folder.parent / "staging")


def staging_folder_exists(root: Path) -> bool:
    return root.is_dir() and any(root.iterdir())


def test_load_state_from_a_url_restores_weights_and_optimizer(
    memory: MemoryFolder, in_empty_folder: Path
) -> None:
    url = memory.url
    accelerator, model, optimizer = _train()
    _step(model, optimizer)
    accelerator.save_state(f"{url}/step1")
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    exp_avg = optimizer.state_dict()["state"][0]["exp_avg"].clone()
    _step(model, optimizer)
    accelerator.load_state(f"{url}/step1")
    for name, tensor in weights.items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"], exp_avg)
    assert not staging_folder_exists(in_empty_folder.parent / "staging")


def test_rotation_and_latest_see_only_complete_checkpoints(
    memory: MemoryFolder, in_empty_folder: Path
) -> None:
    url, fs, root = memory
    accelerator, model, optimizer = _train(url, limit=2)
    saved = []
    for _ in range(4):
        _step(model, optimizer)
        accelerator.save_state()
        saved.append(model.weight.detach().clone())
    folders = _names(fs.ls(f"{root}/checkpoints", detail=False))
    assert folders == ["checkpoint_2", "checkpoint_3"]
    # a later save that never finished: files, no manifest
    fs.pipe_file(f"{root}/checkpoints/checkpoint_9/model.safetensors", b"partial")
    _step(model, optimizer)
    accelerator.load_state()
    assert torch.equal(model.weight, saved[-1])  # checkpoint_3, not the partial checkpoint_9
    assert accelerator.project_configuration.iteration == 4
    accelerator.save_state()  # checkpoint_4; rotation leaves the partial one alone
    folders = _names(fs.ls(f"{root}/checkpoints", detail=False))
    assert folders == ["checkpoint_3", "checkpoint_4", "checkpoint_9"]
    manifest = json.loads(fs.cat_file(f"{root}/checkpoints/checkpoint_4/accel_checkpoint.json"))
    assert manifest["iteration"] == 4


def test_a_folder_without_manifest_is_not_loaded(
    memory: MemoryFolder, in_empty_folder: Path
) -> None:
    url, fs, root = memory
    fs.pipe_file(f"{root}/broken/model.safetensors", b"partial")
    accelerator, model, _ = _train()
    before = model.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"broken is not a complete checkpoint .*no accel_"):
        accelerator.load_state(f"{url}/broken")
    assert torch.equal(model.weight, before)


def test_a_damaged_file_in_the_store_is_refused_before_anything_is_loaded(
    memory: MemoryFolder, in_empty_folder: Path
) -> None:
    url, fs, root = memory
    accelerator, model, optimizer = _train()
    _step(model, optimizer)
    accelerator.save_state(f"{url}/step1")
    data = bytearray(fs.cat_file(f"{root}/step1/optimizer.bin"))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(f"{root}/step1/optimizer.bin", bytes(data))
    _step(model, optimizer)
    before = model.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"step1/optimizer.bin is corrupt: .*\(block 0\)"):
        accelerator.load_state(f"{url}/step1")
    assert torch.equal(model.weight, before)
    fs.pipe_file(f"{root}/step1/optimizer.bin", bytes(data[:-10]))
    with pytest.raises(CheckpointError, match=r"optimizer.bin is truncated .* the manifest says"):
        accelerator.load_state(f"{url}/step1")
    assert not staging_folder_exists(in_empty_folder.parent / "staging")


def test_a_failed_streaming_write_leaves_no_object_and_no_checkpoint(
    memory: MemoryFolder, in_empty_folder: Path
) -> None:
    url, fs, root = memory
    accelerator, model, optimizer = _train()
    _step(model, optimizer)
    accelerator.register_for_checkpointing(_Unpicklable())
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0.pkl failed"):
        accelerator.save_state(f"{url}/broken")
    assert not fs.exists(f"{root}/broken/custom_checkpoint_0.pkl")
    assert not fs.exists(f"{root}/broken/accel_checkpoint.json")


class _Unpicklable:
    """A registered object whose state torch.save can't write (a function in it)."""

    def state_dict(self) -> dict[str, object]:
        return {"weights": torch.ones(1 << 20), "callback": lambda: None}

    def load_state_dict(self, state: dict[str, object]) -> None:
        raise AssertionError("never loaded")


def test_async_save_to_a_url(memory: MemoryFolder, in_empty_folder: Path) -> None:
    url = memory.url
    accelerator, model, optimizer = _train()
    _step(model, optimizer)
    expected = model.weight.detach().clone()
    accelerator.save_state(f"{url}/async", async_save=True)
    _step(model, optimizer)  # changes the weights while the copy is written
    accelerator.wait_for_everyone()
    accelerator.load_state(f"{url}/async")
    assert torch.equal(model.weight, expected)


def test_file_urls_are_local_folders(tmp_path: Path, in_empty_folder: Path) -> None:
    accelerator, _, _ = _train()
    accelerator.save_state(f"file://{tmp_path}/as-url")
    assert (tmp_path / "as-url" / "accel_checkpoint.json").is_file()
    accelerator.load_state(f"file://{tmp_path}/as-url")


def test_an_unknown_protocol_is_refused_before_anything_is_written(in_empty_folder: Path) -> None:
    accelerator, _, _ = _train()
    with pytest.raises(CheckpointError, match=r"fsspec knows no protocol 'nosuch'.*written"):
        accelerator.save_state("nosuch://bucket/run/step3")
    with pytest.raises(CheckpointError, match=r"no protocol 'nosuch'.*Nothing was loaded"):
        accelerator.load_state("nosuch://bucket/run/step3")
    assert os.listdir(in_empty_folder) == []


@pytest.mark.skipif(
    importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed: nothing to refuse"
)
def test_s3_without_s3fs_names_the_extra(in_empty_folder: Path) -> None:
    accelerator, model, _ = _train()
    with pytest.raises(CheckpointError, match=r"pip install 'accel-core\[s3\]'"):
        accelerator.save_state("s3://bucket/run/step3")
    with pytest.raises(CheckpointError, match=r"accel-core\[s3\]"):
        accelerator.save_model(model, "s3://bucket/model")
    assert os.listdir(in_empty_folder) == []  # before: a local folder "s3:" held the checkpoint


def test_save_model_to_a_url_reads_back_with_safetensors(
    memory: MemoryFolder, in_empty_folder: Path
) -> None:
    from safetensors.torch import load

    url, fs, root = memory
    accelerator, model, _ = _train()
    accelerator.save_model(model, f"{url}/model", max_shard_size=40)
    index = json.loads(fs.cat_file(f"{root}/model/model.safetensors.index.json"))
    loaded: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        loaded.update(load(fs.cat_file(f"{root}/model/{shard}")))
    assert loaded.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor), name
    # saved again unsharded: the shards and the index of the first save are gone
    accelerator.save_model(model, f"{url}/model")
    assert _names(fs.find(f"{root}/model")) == ["model.safetensors"]


def test_staging_folders_differ_per_url_and_machine() -> None:
    from accel_core.checkpointing.object_storage import remote_folder

    a = remote_folder("memory://x/a", operation="save_state")
    b = remote_folder("memory://x/b", operation="save_state")
    assert len({staging_folder(a, 0), staging_folder(a, 1), staging_folder(b, 0)}) == 3
