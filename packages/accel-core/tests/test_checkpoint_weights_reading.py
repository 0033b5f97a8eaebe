"""load_state reads model.safetensors by its header, then straight into the model's tensors.

Each way a tensor can arrive is compared with safetensors' own reader: bytes straight into the
parameter, a cast through a temporary (another dtype), a model that customises loading (through
``load_state_dict``), a damaged header, and a checkpoint without manifest (Accelerate's) that is
truncated: an error before anything changes.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from accel_core import Accelerator
from accel_core.checkpointing import CheckpointError
from accel_core.checkpointing.weights_file import read_header, read_into


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2, bias=False)
    )
    model[1].running_mean.uniform_()
    model[1].num_batches_tracked.fill_(7)
    return model


def _saved(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    accelerator = Accelerator()
    accelerator.prepare(_model(0))
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    return folder, load_file(folder / "model.safetensors")


def _loaded(folder: Path, model: torch.nn.Module) -> torch.nn.Module:
    accelerator = Accelerator()
    prepared = accelerator.prepare(model)
    accelerator.load_state(folder)
    return prepared


def test_weights_arrive_bit_for_bit_including_buffers(tmp_path):
    folder, saved = _saved(tmp_path)
    model = _loaded(folder, _model(1))
    state = model.state_dict()
    assert sorted(state) == sorted(saved)
    for key, value in saved.items():
        assert torch.equal(state[key], value), key
    assert int(model[1].num_batches_tracked) == 7


def test_another_dtype_is_cast_as_load_state_dict_casts(tmp_path):
    folder, saved = _saved(tmp_path)
    model = _loaded(folder, _model(1).double())
    for key, value in saved.items():
        loaded = model.state_dict()[key]
        assert loaded.dtype == (
            torch.int64 if key.endswith("num_batches_tracked") else torch.float64
        )
        assert torch.equal(loaded, value.to(loaded.dtype)), key


def test_a_model_with_load_hooks_goes_through_load_state_dict(tmp_path):
    folder, saved = _saved(tmp_path)
    model = _model(1)
    seen = []
    model[0].register_load_state_dict_post_hook(lambda module, keys: seen.append(type(module)))
    model = _loaded(folder, model)
    assert seen == [torch.nn.Linear]
    assert torch.equal(model[0].weight.detach(), saved["0.weight"])


def _with_load_hook(model: torch.nn.Module) -> torch.nn.Module:
    model[0].register_load_state_dict_post_hook(lambda module, keys: None)
    return model


def _transposed_weight(model: torch.nn.Module) -> torch.nn.Module:
    # A parameter that is a non-contiguous view: its bytes can't be copied as they are.
    model[0].weight = torch.nn.Parameter(model[0].weight.detach().t().contiguous().t())
    assert not model[0].weight.is_contiguous()
    return model


@pytest.mark.parametrize(
    "arrange",
    [lambda model: model, _with_load_hook, _transposed_weight],
    ids=["straight", "through load_state_dict", "non-contiguous parameter"],
)
def test_loaded_weights_keep_no_view_of_the_file(tmp_path, arrange):
    folder, saved = _saved(tmp_path)
    saved = {key: value.clone() for key, value in saved.items()}  # load_file maps the file too
    model = _loaded(folder, arrange(_model(1)))
    path = folder / "model.safetensors"
    with open(path, "r+b") as handle:  # overwritten in place: a map of it would see the zeros
        handle.write(bytes(path.stat().st_size))
    for key, value in saved.items():
        assert torch.equal(model.state_dict()[key], value), key
    model(torch.randn(5, 3)).sum().backward()  # and the parameters are the model's own


def test_a_file_cut_short_after_its_header_was_read_is_an_error_that_changes_nothing(tmp_path):
    folder, _ = _saved(tmp_path)
    path = folder / "model.safetensors"
    entries = read_header(path)
    model = _model(1)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 4)  # after the header was read
    with pytest.raises(CheckpointError, match=r"model.safetensors can't be read: .*inside tensor"):
        read_into(path, entries, model.state_dict(keep_vars=True))
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_a_damaged_header_is_named(tmp_path):
    folder, _ = _saved(tmp_path)
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[0:8] = struct.pack("<Q", len(data) * 2)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"header claims \d+ bytes of a \d+-byte file"):
        read_header(path)


def test_a_truncated_accelerate_checkpoint_changes_nothing(tmp_path):
    folder, _ = _saved(tmp_path)
    (folder / "accel_checkpoint.json").unlink()  # as Accelerate writes it: no manifest
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    model = _model(1)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"model.safetensors can't be read: .*'2.weight'"):
        _loaded(folder, model)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_header_entries_match_safetensors_own_reader(tmp_path):
    folder, saved = _saved(tmp_path)
    entries = read_header(folder / "model.safetensors")
    assert set(entries) == set(saved)
    header_length = struct.unpack("<Q", (folder / "model.safetensors").read_bytes()[:8])[0]
    raw = json.loads((folder / "model.safetensors").read_bytes()[8 : 8 + header_length])
    for key, value in saved.items():
        assert entries[key].shape == tuple(value.shape) and entries[key].dtype == value.dtype
        assert entries[key].start - 8 - header_length == raw[key]["data_offsets"][0]
    shutil.rmtree(folder)


def _optimizer_setup(seed: int):
    accelerator = Accelerator()
    model = _model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(5, 3)).square().mean().backward()
    optimizer.step()
    return accelerator, model, optimizer


def _optimizer_tensors(optimizer) -> dict:
    return {
        (index, key): value
        for index, entries in optimizer.state_dict()["state"].items()
        for key, value in entries.items()
        if isinstance(value, torch.Tensor)
    }


def test_a_reload_in_process_fills_the_optimizers_own_tensors_and_keeps_no_file_mapping(
    tmp_path,
):
    accelerator, model, optimizer = _optimizer_setup(0)
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    saved = {key: value.clone() for key, value in _optimizer_tensors(optimizer).items()}
    model(torch.randn(5, 3)).square().mean().backward()
    optimizer.step()  # the state moves on; the reload must bring back the saved values
    live = _optimizer_tensors(optimizer)
    accelerator.load_state(folder)
    after = _optimizer_tensors(optimizer)
    assert set(after) == set(saved)
    for key, value in saved.items():
        assert torch.equal(after[key], value), key
        if live[key].dim() > 0:
            assert after[key] is live[key], f"{key}: a new tensor instead of the optimizer's own"
    # Nothing may still read the file: overwrite it and the state must not change.
    path = folder / "optimizer.bin"
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.write(bytes(size))
    for key, value in saved.items():
        assert torch.equal(_optimizer_tensors(optimizer)[key], value), key
    optimizer.step()  # and it trains on


def test_a_first_load_keeps_nothing_mapped_from_optimizer_bin(tmp_path):
    accelerator, _, optimizer = _optimizer_setup(0)
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    saved = {key: value.clone() for key, value in _optimizer_tensors(optimizer).items()}
    fresh = Accelerator()
    fresh_model = _model(1)
    fresh_optimizer = torch.optim.AdamW(fresh_model.parameters(), lr=0.1)
    fresh_model, fresh_optimizer = fresh.prepare(fresh_model, fresh_optimizer)
    assert not fresh_optimizer.state_dict()["state"]  # a resumed run: no state yet
    fresh.load_state(folder)
    path = folder / "optimizer.bin"
    with open(path, "r+b") as handle:
        handle.write(bytes(path.stat().st_size))
    after = _optimizer_tensors(fresh_optimizer)
    assert set(after) == set(saved)
    for key, value in saved.items():
        assert torch.equal(after[key], value), key
    fresh_model(torch.randn(5, 3)).square().mean().backward()
    fresh_optimizer.step()  # its state is its own memory: it trains on


class _Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def test_a_tied_weight_stored_once_is_accepted_and_a_really_missing_key_is_not():
    from accel_core.checkpointing.model_states import check_model_state

    model = _Tied()
    # the tied Parameter is found by identity (any device), not only by its storage's address
    once = {"embed.weight": torch.ones(5, 3)}
    assert list(check_model_state("f", once, model, strict=True)) == ["embed.weight"]
    # without either name, the weight is missing (named once: the second name is the tie)
    with pytest.raises(CheckpointError, match=r"missing keys 'embed\.weight', unexpected keys"):
        check_model_state("f", {}, model, strict=True)
