"""Block checksums of the manifest (version 2): written at block boundaries whatever the sizes of
the writes, split evenly between the processes of a node when a checkpoint is verified, and
version-1 manifests (one checksum per whole file) still read and verified."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pytest
import torch
import xxhash

from accel_core import Accelerator
from accel_core.checkpointing import CheckpointError, CheckpointWriter, FileRecord, Manifest
from accel_core.checkpointing import manifest as manifest_module
from accel_core.checkpointing.manifest import (
    BLOCK_SIZE,
    BlockChecksums,
    _consecutive_runs,
    block_spans,
    checksum_share,
    file_block_checksums,
)
from accel_core.checkpointing.restore import hashing_threads
from accel_testing import run_workers

HERE = Path(__file__)


def _xxh3(data: bytes) -> str:
    return xxhash.xxh3_64(data).hexdigest()


@pytest.mark.parametrize("total", [0, 1, 999, 1000, 1001, 5000, 7777])
def test_blocks_of_odd_sized_writes_equal_the_blocks_read_back(tmp_path, total):
    block_size = 1000
    data = random.Random(total).randbytes(total)
    checksums = BlockChecksums(block_size)
    pieces = random.Random(1).choices([1, 7, 999, 1000, 1001, 2345], k=total)
    offset = 0
    for size in pieces:
        if offset >= total:
            break
        checksums.update(memoryview(data)[offset : offset + size])
        offset += size
    path = tmp_path / "file"
    path.write_bytes(data)
    expected = [_xxh3(data[s:e]) for s, e in block_spans(total, block_size)]
    assert len(expected) == -(-total // block_size)  # no empty block after a full one
    assert checksums.digests() == expected
    assert file_block_checksums(path, block_size) == expected


def test_torch_save_files_get_the_blocks_read_back_on_the_helper_thread(tmp_path):
    # 3 blocks of the real block size: torch.save's writes cross the boundaries anywhere.
    tensors = {"a": torch.randn(BLOCK_SIZE // 4 + 3), "b": torch.randn(BLOCK_SIZE // 4 + 5)}
    writer = CheckpointWriter(tmp_path, rank=0, world_size=1, is_writer=True)
    writer.write_object("written.bin", tensors)
    torch.save(tensors, tmp_path / "other.bin")
    writer.record("other.bin")
    records = writer.finish()
    streamed, read_back = records["written.bin"], records["other.bin"]
    assert len(streamed.blocks) == len(read_back.blocks) == 3
    assert streamed.blocks == file_block_checksums(tmp_path / "written.bin")
    assert read_back.blocks == file_block_checksums(tmp_path / "other.bin")


def _manifest(sizes: dict[str, int], block_size: int) -> Manifest:
    files = {
        name: FileRecord(size, [f"{i:016x}" for i, _ in enumerate(block_spans(size, block_size))])
        for name, size in sizes.items()
    }
    return Manifest(1, 0, 0, "ddp", files=files, block_size=block_size)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("seed", range(5))
def test_shares_cover_every_block_once_and_differ_by_at_most_one_block(count, seed):
    chosen = random.Random(seed)
    block_size = 1 << 20
    sizes = {f"file_{i}": chosen.choice([0, 1, 4096, block_size, 3 * block_size]) for i in range(4)}
    sizes.update({f"big_{i}": chosen.randrange(1, 40 * block_size) for i in range(3)})
    manifest = _manifest(sizes, block_size)
    shares = [checksum_share(manifest, index, count) for index in range(count)]
    every = [(b.name, b.start) for share in shares for b in share]
    assert sorted(every) == [(b.name, b.start) for b in manifest.blocks()]
    loads = [sum(block.size for block in share) for share in shares]
    assert max(loads) - min(loads) <= block_size
    assert sum(loads) == sum(sizes.values())


def test_the_benchmark_checkpoint_splits_evenly_between_two_processes():
    # The sizes of the 504 MB checkpoint (a 168 MB model, a 336 MB optimizer): by whole files one
    # process hashed twice as much as the other.
    sizes = {"model.safetensors": 167_855_104, "optimizer.bin": 335_741_541}
    sizes.update({"random_states_0.pkl": 15_285, "random_states_1.pkl": 15_285})
    manifest = _manifest(sizes, BLOCK_SIZE)
    loads = [sum(b.size for b in checksum_share(manifest, i, 2)) for i in range(2)]
    assert abs(loads[0] - loads[1]) <= BLOCK_SIZE
    assert max(loads) < 0.51 * sum(sizes.values())


@pytest.mark.parametrize("count", [1, 2, 3, 5, 64])
def test_runs_for_threads_are_consecutive_blocks_of_about_equal_bytes(count):
    block_size = 1 << 20
    sizes = {"a": 5 * block_size + 17, "b": 0, "c": 3 * block_size, "d": 1000}
    blocks = sorted(_manifest(sizes, block_size).blocks(), key=lambda b: (b.name, b.start))
    runs = _consecutive_runs(blocks, count)
    assert [b for run in runs for b in run] == blocks  # each block once, in order
    assert 1 <= len(runs) <= min(count, len(blocks)) and all(runs)
    loads = [sum(b.size for b in run) for run in runs]
    assert max(loads) - min(loads) <= 2 * block_size
    assert _consecutive_runs([], count) == [[]]


def _blocks_folder(tmp_path: Path, block_size: int) -> tuple[Manifest, Path]:
    """Two files of random bytes and a manifest of their ``block_size`` blocks."""
    chosen = random.Random(0)
    files = {}
    for name, size in {"a.bin": 10 * block_size + 5, "b.bin": 7 * block_size}.items():
        data = chosen.randbytes(size)
        (tmp_path / name).write_bytes(data)
        checksums = BlockChecksums(block_size)
        checksums.update(data)
        files[name] = FileRecord(size, checksums.digests())
    return Manifest(1, 0, 0, "ddp", files=files, block_size=block_size), tmp_path


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_verifying_on_threads_names_the_same_first_changed_block(tmp_path, threads):
    block_size = 4096
    manifest, folder = _blocks_folder(tmp_path, block_size)
    hashed_on = []
    check_run = manifest_module._check_run

    def spy(folder, blocks):
        hashed_on.append(threading.current_thread().name)
        check_run(folder, blocks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_module, "_check_run", spy)
        manifest.verify(folder, threads=threads)  # intact: no error on any thread
    # one run per thread, each on a helper thread (the pool may reuse a thread that finished)
    assert len(hashed_on) == threads and all(n.startswith("accel-verify") for n in hashed_on)
    # Two changed blocks, in different runs: the first in block order is the one named.
    _flip(folder / "b.bin", 5 * block_size + 1)
    _flip(folder / "a.bin", 2 * block_size + 3)
    with pytest.raises(CheckpointError) as one_thread:
        manifest.verify(folder)
    with pytest.raises(CheckpointError) as several:
        manifest.verify(folder, threads=threads)
    assert str(several.value) == str(one_thread.value)
    assert "a.bin is corrupt: its checksum is" in str(several.value)
    assert f"for bytes {2 * block_size}-{3 * block_size - 1} (block 2)" in str(several.value)


@pytest.mark.parametrize(
    ("cores", "processes", "threads"), [(2, 1, 2), (2, 2, 1), (2, 3, 1), (96, 8, 8), (64, 1, 8)]
)
def test_each_process_hashes_on_its_share_of_the_cores(monkeypatch, cores, processes, threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert hashing_threads(processes) == threads


def _saved(tmp_path: Path) -> tuple[Accelerator, torch.nn.Module, Path]:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(128, 64))  # 33 kB: the biggest file
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    return accelerator, model, folder


def _as_version_1(folder: Path) -> None:
    """Rewrite the manifest of ``folder`` as accel-core 0.2 wrote it: one checksum per file."""
    path = folder / "accel_checkpoint.json"
    data = json.loads(path.read_text())
    data["version"] = 1
    del data["block_size"]
    data["files"] = {
        name: {"size": r["size"], "checksum": _xxh3((folder / name).read_bytes()), "rank": 0}
        for name, r in data["files"].items()
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def test_a_version_2_manifest_lists_the_block_size_and_the_blocks(tmp_path):
    _, _, folder = _saved(tmp_path)
    data = json.loads((folder / "accel_checkpoint.json").read_text())
    assert data["version"] == 2 and data["block_size"] == BLOCK_SIZE
    for name, record in data["files"].items():
        assert "checksum" not in record
        assert record["blocks"] == [_xxh3((folder / name).read_bytes())]  # small: one block


def test_a_version_1_manifest_still_loads_and_verifies(tmp_path):
    accelerator, model, folder = _saved(tmp_path)
    saved = model.weight.detach().clone()
    _as_version_1(folder)
    manifest = Manifest.read(folder)
    assert manifest.block_size is None
    manifest.verify(folder)
    # Whole files are the blocks: one process checks the biggest file, the other the rest.
    shares = [{b.name for b in checksum_share(manifest, i, 2)} for i in range(2)]
    assert shares == [{"model.safetensors"}, {"random_states_0.pkl"}]
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(folder)
    assert torch.equal(model.weight, saved)

    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    message = rf"model.safetensors is corrupt: its checksum is \w+ for bytes 0-{len(data) - 1} "
    with pytest.raises(CheckpointError, match=message + r"\(block 0\)"):
        accelerator.load_state(folder)


def test_a_manifest_of_an_unknown_version_or_with_missing_blocks_is_refused(tmp_path):
    _, _, folder = _saved(tmp_path)
    path = folder / "accel_checkpoint.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "version": 3}))
    with pytest.raises(CheckpointError, match="version 3 is not one this accel-core reads"):
        Manifest.read(folder)
    data["files"]["model.safetensors"]["blocks"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"model.safetensors has 0 block checksum\(s\)"):
        Manifest.read(folder)


def corrupt_last_block_worker() -> None:
    """2 processes: rank 0 flips a byte in the last block of the biggest file; each reports
    whether its own share finds it, then what load_state raises."""
    folder = Path(os.environ["CHECKPOINT_FOLDER"])
    accelerator = Accelerator()
    torch.manual_seed(0)
    # 12.6 MB of weights: model.safetensors has two blocks, the second one short.
    accelerator.prepare(torch.nn.Sequential(*(torch.nn.Linear(1024, 1024) for _ in range(3))))
    accelerator.save_state(folder)
    manifest = Manifest.read(folder)
    biggest = max(manifest.files, key=lambda name: manifest.files[name].size)
    last = manifest.blocks([biggest])[-1]
    if accelerator.is_main_process:
        with open(folder / biggest, "r+b") as handle:
            handle.seek((last.start + last.end) // 2)
            byte = handle.read(1)[0]
            handle.seek(-1, os.SEEK_CUR)
            handle.write(bytes([byte ^ 0xFF]))
    accelerator.wait_for_everyone()
    rank = accelerator.process_index
    try:
        manifest.verify(folder, blocks=checksum_share(manifest, rank, 2))
        found = False
    except CheckpointError:
        found = True
    print(f"SHARE rank={rank} found={found} file={biggest} range={last.start}-{last.end - 1}")
    try:
        accelerator.load_state(folder)
    except CheckpointError as error:
        print(f"LOADERR rank={rank} {error}")
    accelerator.end_training()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_corrupt_last_block_is_found_by_one_share_and_reported_on_every_rank(tmp_path):
    results = run_workers(
        2,
        function=f"{HERE}::corrupt_last_block_worker",
        env={"CHECKPOINT_FOLDER": str(tmp_path / "ckpt")},
    )
    lines = [line for r in results for line in r.stdout.splitlines()]
    shares = [line for line in lines if line.startswith("SHARE")]
    errors = [line.split(" ", 2)[2] for line in lines if line.startswith("LOADERR")]
    assert len(shares) == 2 and len(errors) == 2, [r.stdout + r.stderr[-1500:] for r in results]
    assert sum("found=True" in line for line in shares) == 1
    name, byte_range = shares[0].split("file=")[1].split(" range=")
    assert name == "model.safetensors" and not byte_range.startswith("0-")
    assert errors[0] == errors[1]
    assert f"{name} is corrupt: its checksum is" in errors[0]
    assert f"for bytes {byte_range} (block 1)" in errors[0]
