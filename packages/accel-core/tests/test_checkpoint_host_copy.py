"""The byte copies load_state uses to put a mapped checkpoint tensor into memory.

``copy_into`` must give the same values as ``Tensor.copy_`` for every tensor it is handed (the
fast path and every fallback), and ``copy_new`` must give a tensor that equals the source and
shares no memory with it, so nothing of the result refers to the checkpoint file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accel_core.checkpointing import host_copy


@pytest.mark.parametrize(
    "make_source",
    [
        pytest.param(lambda: torch.randn(3, 5), id="contiguous"),
        pytest.param(lambda: torch.randn(5, 3).t(), id="transposed"),
        pytest.param(lambda: torch.randn(3, 5, dtype=torch.float64), id="other-dtype"),
        pytest.param(lambda: torch.empty(0, 5), id="empty"),
        pytest.param(lambda: torch.randn(3, 5, dtype=torch.complex64).conj(), id="lazy-conjugate"),
    ],
)
def test_copy_into_gives_what_copy_gives(make_source) -> None:
    source = make_source()
    dtype = torch.complex64 if source.is_complex() else torch.float32
    target = torch.zeros(tuple(source.shape), dtype=dtype)
    expected = target.clone().copy_(source)
    result = host_copy.copy_into(target, source)
    assert result is target
    assert torch.equal(target, expected)


def test_copy_into_a_strided_target() -> None:
    source = torch.randn(4, 6)
    target = torch.zeros(6, 4).t()
    host_copy.copy_into(target, source)
    assert torch.equal(target, source)


@pytest.mark.parametrize("numel", [0, 7, 3 << 20], ids=["empty", "small", "12MB"])
def test_copy_new_is_an_equal_tensor_in_its_own_memory(numel: int) -> None:
    source = torch.randn(numel)
    copy = host_copy.copy_new(source)
    assert copy.shape == source.shape and copy.dtype == source.dtype
    assert torch.equal(copy, source)
    if numel:
        assert copy.data_ptr() != source.data_ptr()
        source.add_(1.0)
        assert not torch.equal(copy, source)


def test_copy_new_of_a_file_mapping_outlives_the_file(tmp_path: Path) -> None:
    """A tensor mapped from a torch.save file (as load_state reads optimizer.bin), copied, then
    the file rewritten: the copy keeps the values it was given."""
    path = tmp_path / "state.bin"
    values = torch.arange(1 << 19, dtype=torch.float32)
    torch.save({"t": values}, path)
    mapped = torch.load(path, mmap=True, weights_only=True)["t"]
    copy = host_copy.copy_new(mapped)
    del mapped
    torch.save({"t": torch.zeros_like(values)}, path)
    assert torch.equal(copy, values)


def test_copy_new_without_madvise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the OS has no MADV_POPULATE_WRITE the copy is the same."""
    monkeypatch.setattr(host_copy, "_MADVISE", None)
    source = torch.randn(1 << 19)
    assert torch.equal(host_copy.copy_new(source), source)
