"""Load errors and warnings say what happened, and never advise what the caller already did."""

import logging
import os
import pickle

import pytest
import torch
from load_helpers import assert_unchanged, empty_seq_model, seq_model, snapshot
from safetensors.torch import save_file

from accel_bigmodel import load_checkpoint_in_model, load_state_dict
from accel_bigmodel.safetensors_io import CheckpointError


class _RunsACommand:
    """Unpickling this would call os.system; weights_only must refuse it before that."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"echo hi > {self.marker}",))


def _extra_name_checkpoint(tmp_path):
    state = {**seq_model().state_dict(), "extra.bias": torch.zeros(2)}
    save_file(state, str(tmp_path / "model.safetensors"))
    return tmp_path / "model.safetensors"


def test_warning_with_strict_false_does_not_advise_strict_false(tmp_path, caplog):
    path = _extra_name_checkpoint(tmp_path)
    with caplog.at_level(logging.WARNING, logger="accel_bigmodel"):
        load_checkpoint_in_model(empty_seq_model(), path, strict=False)
    [record] = [r for r in caplog.records if "does not fit the model" in r.getMessage()]
    message = record.getMessage()
    assert "1 names in the checkpoint are not in the model:\n  extra.bias" in message
    assert "names unknown to the model are skipped" in message
    assert "strict=True makes this an error" in message
    assert "strict=False" not in message


def test_the_warning_starts_with_accelerates_words(tmp_path, caplog):
    path = _extra_name_checkpoint(tmp_path)
    with caplog.at_level(logging.WARNING, logger="accel_bigmodel"):
        load_checkpoint_in_model(empty_seq_model(), path, strict=False)
    [record] = [r for r in caplog.records if "were not used" in r.getMessage()]
    assert record.msg.startswith(  # the record's msg is the message itself, as Accelerate's
        f"Some weights of the model checkpoint at {path} were not used when initializing "
        "Sequential: ['extra.bias']. the checkpoint"
    )


def test_strict_error_advises_strict_false(tmp_path):
    path = _extra_name_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match=r"pass strict=False to load the names that match"):
        load_checkpoint_in_model(empty_seq_model(), path, strict=True)


def test_missing_tensor_left_on_meta_says_so_without_advising_strict_false(tmp_path):
    state = seq_model().state_dict()
    del state["3.bias"]
    save_file(state, str(tmp_path / "model.safetensors"))
    model = empty_seq_model()
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, tmp_path, strict=False)
    message = str(info.value)
    assert "1 of the missing tensors are on the meta device and would be left without data" in (
        message
    )
    assert "(3.bias)" in message
    assert "strict=False" not in message
    assert_unchanged(model, before)


@pytest.mark.parametrize("writer", ["torch.save", "pickle protocol 2"])
def test_blocked_pickle_says_what_was_refused(tmp_path, writer):
    marker = tmp_path / "ran"
    path = tmp_path / "pytorch_model.bin"
    payload = {"0.weight": _RunsACommand(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        with open(path, "wb") as handle:
            pickle.dump(payload, handle, protocol=2)
    model = seq_model(seed=1)
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(model, path)
    message = str(info.value)
    refused = f"{os.system.__module__}.system"  # posix.system on Linux
    assert (
        f"cannot load {path}: torch.load(weights_only=True) refused to unpickle {refused}: "
        f"weights_only blocks it"
    ) in message
    assert "pytorch_model.bin" in message
    assert "truncated" not in message
    assert not marker.exists()
    assert_unchanged(model, before)
    with pytest.raises(CheckpointError, match=rf"refused to unpickle {refused}"):
        load_state_dict(path)


def test_truncated_bin_says_truncated_and_names_the_file(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save(seq_model().state_dict(), path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_in_model(empty_seq_model(), path)
    message = str(info.value)
    assert f"cannot load {path} with torch.load (RuntimeError: " in message
    assert "the file is truncated or corrupt" in message
    assert "refused" not in message
