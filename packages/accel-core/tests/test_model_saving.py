"""save_model: files, shards and index; tied, non-contiguous and meta tensors; stale files and
failed saves; 2 DDP processes; loading with safetensors, torch.load, accel-bigmodel, transformers.
"""

from __future__ import annotations

import ctypes
import json
import logging
import mmap
import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from accel_core import Accelerator
from accel_core.model_saving import save_model
from accel_core.shard_planning import parse_size
from accel_testing import run_workers

KB = 1024  # bytes of one Linear(16, 16, bias=False) weight in float32


class TiedLM(torch.nn.Module):
    """Input and output embeddings tied, as in a language model."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.body = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.arange(8.0))


def tied_model(seed: int = 0) -> TiedLM:
    torch.manual_seed(seed)
    return TiedLM()


def linears(count: int = 5, seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Linear(16, 16, bias=False) for _ in range(count)])


@pytest.fixture
def accelerator() -> Accelerator:
    return Accelerator(cpu=True)


def weight_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("config"))


def read_safetensors_folder(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, through the index when there is one."""
    index = folder / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.exists()
        else ["model.safetensors"]
    )
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(folder / name))
    return state


def assert_same_tensors(actual: dict, expected: dict) -> None:
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert torch.equal(actual[name], value), name


# --------------------------------------------------------------------------------------------
# files, shards and index


def test_one_file_when_it_fits_read_back_with_safetensors(accelerator, tmp_path):
    model = linears(3)
    accelerator.save_model(model, tmp_path / "out")  # the method calls model_saving.save_model
    assert weight_files(tmp_path / "out") == ["model.safetensors"]
    assert_same_tensors(load_file(tmp_path / "out" / "model.safetensors"), model.state_dict())
    with safe_open(tmp_path / "out" / "model.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}  # transformers refuses files without it


def test_shards_stay_under_max_shard_size_and_the_index_maps_every_tensor(accelerator, tmp_path):
    model = linears(5)
    save_model(accelerator, model, tmp_path, max_shard_size=2 * KB)
    names = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert weight_files(tmp_path) == [*names, "model.safetensors.index.json"]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index == {
        "metadata": {"total_size": 5 * KB},
        "weight_map": {
            "0.weight": names[0],
            "1.weight": names[0],
            "2.weight": names[1],
            "3.weight": names[1],
            "4.weight": names[2],
        },
    }
    for name in names:
        shard = load_file(tmp_path / name)
        assert sum(t.numel() * t.element_size() for t in shard.values()) <= 2 * KB
        assert all(index["weight_map"][key] == name for key in shard)
    assert_same_tensors(read_safetensors_folder(tmp_path), model.state_dict())


def test_a_tensor_larger_than_max_shard_size_gets_its_own_shard(accelerator, tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 4, bias=False),  # 64 bytes
        torch.nn.Linear(64, 64, bias=False),  # 16384 bytes
        torch.nn.Linear(4, 4, bias=False),
        torch.nn.Linear(4, 4, bias=False),
    )
    save_model(accelerator, model, tmp_path, max_shard_size="1KB")
    weight_map = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert weight_map == {  # as transformers splits it: the shard being filled goes on after it
        "0.weight": "model-00002-of-00002.safetensors",
        "1.weight": "model-00001-of-00002.safetensors",
        "2.weight": "model-00002-of-00002.safetensors",
        "3.weight": "model-00002-of-00002.safetensors",
    }
    assert_same_tensors(read_safetensors_folder(tmp_path), model.state_dict())


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (12345, 12345),
        ("10GB", 10 * 10**9),
        ("200MB", 200 * 10**6),
        ("5GiB", 5 * 2**30),
        ("512KiB", 512 * 2**10),
        ("1.5GB", 1_500_000_000),
        ("5gb", 5 * 10**9),
        (" 3 MiB ", 3 * 2**20),
        ("2TB", 2 * 10**12),
        ("100B", 100),
    ],
)
def test_sizes_in_bytes_and_units(given, expected):
    assert parse_size(given) == expected


@pytest.mark.parametrize("given", ["10", "GB", "10XB", "ten GB", "-5MB", "0GB", 0, -1, True, 1.5])
def test_bad_sizes_name_the_value_and_the_accepted_forms(given, accelerator, tmp_path):
    with pytest.raises(ValueError, match=r"max_shard_size=.*expected an int \(bytes\).*GiB"):
        save_model(accelerator, linears(1), tmp_path / "out", max_shard_size=given)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# tied, non-contiguous, empty, meta and non-tensor values


def test_tied_weights_saved_once_and_tied_again_by_load_state_dict(accelerator, tmp_path):
    model = tied_model()
    save_model(accelerator, model, tmp_path, max_shard_size="3KB")  # embed alone is 3200 bytes
    saved = read_safetensors_folder(tmp_path)
    assert "head.weight" not in saved and torch.equal(saved["embed.weight"], model.embed.weight)
    fresh = tied_model(seed=1)
    assert not torch.equal(fresh.embed.weight, model.embed.weight)
    result = fresh.load_state_dict(saved, strict=False)
    assert result.missing_keys == ["head.weight"] and result.unexpected_keys == []
    fresh.head.weight = fresh.embed.weight  # what tie_weights() does
    assert fresh.head.weight is fresh.embed.weight
    assert_same_tensors(fresh.state_dict(), model.state_dict())


def test_non_contiguous_tensors_are_saved_contiguous(accelerator, tmp_path):
    model = linears(1)
    model.register_buffer("transposed", torch.arange(6.0).reshape(2, 3).t())
    assert not model.transposed.is_contiguous()
    save_model(accelerator, model, tmp_path)
    assert_same_tensors(load_file(tmp_path / "model.safetensors"), model.state_dict())


def test_empty_tensors_are_all_kept(accelerator, tmp_path):
    model = linears(1)
    model.register_buffer("none", torch.zeros(0))
    model.register_buffer("no_rows", torch.zeros(0, 3))
    save_model(accelerator, model, tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert sorted(saved) == ["0.weight", "no_rows", "none"]
    assert saved["no_rows"].shape == (0, 3)


def test_meta_tensors_raise_before_anything_is_written(accelerator, tmp_path):
    model = linears(2)
    model.append(torch.nn.Linear(16, 16, device="meta"))
    with pytest.raises(RuntimeError, match=r"2 tensors are on the meta device.*2\.weight, 2\.bias"):
        save_model(accelerator, model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


class WithExtraState(torch.nn.Linear):
    def get_extra_state(self) -> dict:
        return {"note": "kept"}

    def set_extra_state(self, state: dict) -> None:
        self.extra = state


def test_values_that_are_not_tensors_need_torch_save(accelerator, tmp_path):
    model = WithExtraState(2, 2)
    with pytest.raises(TypeError, match=r"_extra_state.*safe_serialization=False"):
        save_model(accelerator, model, tmp_path / "safe")
    assert not (tmp_path / "safe").exists()
    save_model(accelerator, model, tmp_path / "pickle", safe_serialization=False)
    loaded = torch.load(tmp_path / "pickle" / "pytorch_model.bin", weights_only=True)
    assert loaded["_extra_state"] == {"note": "kept"}
    assert torch.equal(loaded["weight"], model.weight)


def test_torch_save_format_shards_keep_tied_weights_shared(accelerator, tmp_path):
    model = tied_model()
    save_model(accelerator, model, tmp_path, max_shard_size="3KB", safe_serialization=False)
    index = json.loads((tmp_path / "pytorch_model.bin.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]
    assert weight_files(tmp_path) == [*files, "pytorch_model.bin.index.json"]
    assert index["metadata"]["total_size"] == 3200 + 1024 + 64 + 32  # embed counted once
    assert index["weight_map"]["head.weight"] == index["weight_map"]["embed.weight"]
    state = {}
    for name in files:
        shard = torch.load(tmp_path / name, weights_only=True)
        assert all(index["weight_map"][key] == name for key in shard)
        state.update(shard)
    assert_same_tensors(state, model.state_dict())
    assert state["head.weight"].data_ptr() == state["embed.weight"].data_ptr()
    save_model(accelerator, model, tmp_path / "one", safe_serialization=False)
    assert weight_files(tmp_path / "one") == ["pytorch_model.bin"]
    loaded = torch.load(tmp_path / "one" / "pytorch_model.bin", weights_only=True)
    assert_same_tensors(loaded, model.state_dict())


# --------------------------------------------------------------------------------------------
# the folder: existing file, stale files, failed saves, who writes


def test_an_existing_file_as_save_directory_raises_before_writing(accelerator, tmp_path):
    target = tmp_path / "weights"
    target.write_bytes(b"not a folder")
    with pytest.raises(NotADirectoryError, match=r"is an existing file: pass a folder"):
        save_model(accelerator, linears(1), target)
    assert target.read_bytes() == b"not a folder"
    assert sorted(os.listdir(tmp_path)) == ["weights"]


def test_files_of_a_previous_save_that_are_not_reused_are_removed(accelerator, tmp_path, caplog):
    save_model(accelerator, linears(5), tmp_path, max_shard_size=KB)  # 5 shards
    keep = [
        "config.json",
        "model.fp16-00001-of-00002.safetensors",  # a variant: another checkpoint
        "model-00001-of-00002.safetensors.bak",
        "notes-00001-of-00002.safetensors",
    ]
    for name in keep:
        (tmp_path / name).write_text("user file")
    model = linears(5, seed=1)
    save_model(accelerator, model, tmp_path, max_shard_size=2 * KB)  # 3 shards
    shards = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, *shards, "model.safetensors.index.json"])
    assert_same_tensors(read_safetensors_folder(tmp_path), model.state_dict())
    save_model(accelerator, model, tmp_path)  # one file: the index and the shards go
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, "model.safetensors"])
    save_model(accelerator, model, tmp_path, max_shard_size=2 * KB)  # and back
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, *shards, "model.safetensors.index.json"])
    with caplog.at_level(logging.WARNING, logger="accel_core.model_saving"):
        save_model(accelerator, model, tmp_path, safe_serialization=False)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [*keep, *shards, "model.safetensors.index.json", "pytorch_model.bin"]
    )
    assert "model.safetensors.index.json" in caplog.text and "delete them" in caplog.text


def test_a_failed_save_leaves_the_previous_checkpoint_as_it_was(accelerator, tmp_path, monkeypatch):
    import safetensors.torch

    save_model(accelerator, linears(5), tmp_path, max_shard_size=2 * KB)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    real_save_file, calls = safetensors.torch.save_file, []
    waits = []
    monkeypatch.setattr(Accelerator, "wait_for_everyone", lambda self: waits.append(1))

    def fail_on_third_shard(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", fail_on_third_shard)
    # the same three file names, split otherwise: [0], [1, 2], [3, 4]
    model = torch.nn.Sequential(torch.nn.Linear(16, 32, bias=False), *linears(4, seed=1))
    with pytest.raises(OSError, match="No space left"):
        save_model(accelerator, model, tmp_path, max_shard_size=2 * KB)
    assert len(calls) == 3
    assert waits == [1]  # the other processes are released, not left waiting
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before
    assert_same_tensors(read_safetensors_folder(tmp_path), linears(5).state_dict())


def _resident_pages(path: Path) -> int:
    """How many pages of the file ``path`` are in the page cache (mincore of a mapping of it;
    neither reads the file)."""
    size = path.stat().st_size
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    pages = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
    start = ctypes.c_char.from_buffer(mapped)
    try:
        assert libc.mincore(ctypes.addressof(start), size, pages) == 0
    finally:
        del start
        mapped.close()
    return sum(page & 1 for page in pages)


def test_saving_over_a_previous_save_first_releases_its_cached_pages(
    accelerator, tmp_path, monkeypatch
):
    """The new file reuses the memory of the one it replaces: when it is written, the old file's
    (clean) pages have left the page cache, and the old file is still whole until the rename."""
    from accel_core import model_saving

    model = torch.nn.Sequential(torch.nn.Linear(512, 512))  # 1 MB
    save_model(accelerator, model, tmp_path)
    old = tmp_path / "model.safetensors"
    old_bytes = old.read_bytes()
    os.sync()  # clean pages: the only ones the kernel drops
    if _resident_pages(old) == 0:
        pytest.skip(f"the filesystem of {tmp_path} keeps no page cache for the file")
    seen = []
    write_shard = model_saving._write_shard

    def spy(shard, path, weights_format):
        resident = _resident_pages(old)  # first: reading the file brings its pages back
        seen.append((resident, old.read_bytes() == old_bytes))
        write_shard(shard, path, weights_format)

    monkeypatch.setattr(model_saving, "_write_shard", spy)
    torch.nn.init.zeros_(model[0].weight)
    save_model(accelerator, model, tmp_path)
    assert seen == [(0, True)]
    assert torch.equal(load_file(old)["0.weight"], torch.zeros(512, 512))


@pytest.mark.parametrize("save_on_each_node", [False, True])
def test_only_the_main_process_writes_or_each_node_main(
    save_on_each_node, accelerator, tmp_path, monkeypatch
):
    """A process that is its node's main but not the global main (rank 0 of node 2)."""
    monkeypatch.setattr(Accelerator, "is_main_process", property(lambda self: False))
    monkeypatch.setattr(Accelerator, "is_local_main_process", property(lambda self: True))
    waits = []
    monkeypatch.setattr(Accelerator, "wait_for_everyone", lambda self: waits.append(1))
    accelerator.project_configuration.save_on_each_node = save_on_each_node
    save_model(accelerator, linears(2), tmp_path / "out")
    assert (tmp_path / "out").exists() == save_on_each_node
    assert waits == [1]


# --------------------------------------------------------------------------------------------
# loaders: accel-bigmodel, transformers


@pytest.mark.parametrize("max_shard_size", ["10GB", "3KB"], ids=["one-file", "sharded"])
def test_accel_bigmodel_loads_it_and_ties_the_weights_again(max_shard_size, accelerator, tmp_path):
    bigmodel = pytest.importorskip("accel_bigmodel")
    model = tied_model()
    save_model(accelerator, model, tmp_path, max_shard_size=max_shard_size)
    fresh = tied_model(seed=1)
    bigmodel.load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert fresh.head.weight is fresh.embed.weight
    assert_same_tensors(fresh.state_dict(), model.state_dict())
    with bigmodel.init_empty_weights():
        skeleton = TiedLM()
    dispatched = bigmodel.load_checkpoint_and_dispatch(skeleton, tmp_path, device_map={"": "cpu"})
    assert dispatched.head.weight is dispatched.embed.weight
    assert_same_tensors(dispatched.state_dict(), model.state_dict())


@pytest.mark.parametrize("max_shard_size", ["10GB", "20KB"], ids=["one-file", "sharded"])
def test_transformers_from_pretrained_loads_it_bit_identically(
    max_shard_size, accelerator, tmp_path
):
    transformers = pytest.importorskip("transformers")
    sizes = {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 96, "n_positions": 32}
    config = transformers.GPT2Config(
        **sizes, bos_token_id=0, eos_token_id=0, tie_word_embeddings=True
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    model.config.save_pretrained(tmp_path)
    save_model(accelerator, model, tmp_path, max_shard_size=max_shard_size)
    assert (tmp_path / "model.safetensors.index.json").exists() == (max_shard_size == "20KB")
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    assert_same_tensors(loaded.state_dict(), model.state_dict())


# --------------------------------------------------------------------------------------------
# 2 DDP processes


def ddp_worker() -> None:
    out, rank = Path(os.environ["OUT"]), int(os.environ["RANK"])
    torch.set_num_threads(1)
    accelerator = Accelerator()
    model = accelerator.prepare(tied_model())
    assert accelerator.strategy.name == "ddp"
    # Each rank names its own folder: a folder that appears for rank 1 means rank 1 wrote.
    save_model(accelerator, model, out / f"sharded-rank{rank}", max_shard_size="3KB")
    save_model(accelerator, model, out / f"single-rank{rank}")
    (out / f"done{rank}").write_text("ok")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_ddp_processes_write_once_the_files_of_one_process(accelerator, tmp_path):
    run_workers(2, function=f"{__file__}::ddp_worker", env={"OUT": str(tmp_path)}, timeout=120)
    assert sorted(os.listdir(tmp_path)) == ["done0", "done1", "sharded-rank0", "single-rank0"]
    model = tied_model()
    for kind, max_shard_size in (("sharded", "3KB"), ("single", "10GB")):
        written, reference = tmp_path / f"{kind}-rank0", tmp_path / f"{kind}-reference"
        save_model(accelerator, model, reference, max_shard_size=max_shard_size)
        assert sorted(os.listdir(written)) == sorted(os.listdir(reference))
        for name in os.listdir(reference):
            assert (written / name).read_bytes() == (reference / name).read_bytes(), name
    assert len(os.listdir(tmp_path / "sharded-rank0")) == 3  # 2 shards and the index
