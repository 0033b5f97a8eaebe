"""accel's S3 transfers against a real S3-compatible server (moto's server mode, over HTTP):
parts sent in parallel, a dropped upload leaving nothing, streamed ranges, and the checked
download of a checkpoint's files (sizes and block checksums against the manifest). Each result
is read back with s3fs's own reader."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.manifest import BlockChecksums, FileRecord
from accel_core.checkpointing.object_storage import RemoteFolder
from accel_core.checkpointing.object_transfers import download, open_upload
from accel_core.checkpointing.s3_transfers import S3PartUpload, S3RangeReader
from accel_testing.s3_server import S3Server

BUCKET = "accel-transfers"
#: S3's smallest part (every part but the last)
PART = 5 << 20


@pytest.fixture(scope="module")
def fs() -> Iterator[Any]:
    with S3Server() as server:
        filesystem = server.filesystem()
        filesystem.mkdir(BUCKET)  # type: ignore[attr-defined]
        yield filesystem


def _multipart_uploads(fs: Any) -> list[str]:
    listed = fs.call_s3("list_multipart_uploads", Bucket=BUCKET)
    return [upload["Key"] for upload in listed.get("Uploads", [])]


def test_parts_are_sent_in_parallel_and_read_back_whole(fs: Any) -> None:
    data = os.urandom(3 * PART + 12345)  # three full parts and a short last one
    upload = S3PartUpload(fs, f"{BUCKET}/parts.bin", part_bytes=PART, in_flight=2)
    for start in range(0, len(data), 1 << 20):  # written in pieces, as torch.save does
        upload.write(memoryview(data)[start : start + (1 << 20)])
    upload.complete()
    assert fs.cat_file(f"{BUCKET}/parts.bin") == data
    # S3 reports a multipart object's ETag as "<md5 of the parts' md5s>-<number of parts>"
    assert fs.info(f"{BUCKET}/parts.bin")["ETag"].strip('"').endswith("-4")
    assert _multipart_uploads(fs) == []


def test_an_object_smaller_than_a_part_is_one_put(fs: Any) -> None:
    upload = S3PartUpload(fs, f"{BUCKET}/small.bin", part_bytes=PART)
    upload.write(b"accel")
    upload.complete()
    assert fs.cat_file(f"{BUCKET}/small.bin") == b"accel"
    assert "-" not in fs.info(f"{BUCKET}/small.bin")["ETag"]


def test_an_abandoned_upload_leaves_no_object_and_no_parts(fs: Any) -> None:
    target = f"{BUCKET}/abandoned.bin"
    with pytest.raises(RuntimeError, match="serializing failed"), open_upload(fs, target) as up:
        up.write(os.urandom(40 << 20))  # more than one part of the default size
        raise RuntimeError("serializing failed")
    assert not fs.exists(f"{BUCKET}/abandoned.bin")
    assert _multipart_uploads(fs) == []


def test_a_part_that_fails_is_reported_by_the_writer(fs: Any) -> None:
    upload = S3PartUpload(fs, "no-such-bucket-accel/x.bin", part_bytes=PART)
    with pytest.raises(OSError):
        upload.write(os.urandom(PART))  # the multipart upload can't even start
        upload.complete()


def test_a_range_streams_exactly_its_bytes(fs: Any) -> None:
    data = os.urandom(1 << 20)
    fs.pipe_file(f"{BUCKET}/range.bin", data)
    with S3RangeReader(fs, f"{BUCKET}/range.bin", 1000, 300_000) as reader:
        pieces = []
        while piece := reader.read(65536):
            pieces.append(piece)
    assert [len(piece) for piece in pieces[:-1]] == [65536] * (len(pieces) - 1)
    assert b"".join(pieces) == data[1000:300_000]


def _stored(fs: Any, name: str, data: bytes, block: int) -> FileRecord:
    fs.pipe_file(f"{BUCKET}/ckpt/{name}", data)
    checksums = BlockChecksums(block)
    checksums.update(data)
    return FileRecord(len(data), checksums.digests(), 0)


def test_download_checks_every_block_and_writes_whole_files(fs: Any, tmp_path: Path) -> None:
    block = 1 << 20
    files = {"model.safetensors": os.urandom(3 * block + 7), "sub/optimizer.bin": os.urandom(10)}
    records = {name: _stored(fs, name, data, block) for name, data in files.items()}
    records["empty.bin"] = _stored(fs, "empty.bin", b"", block)
    folder = RemoteFolder(f"s3://{BUCKET}/ckpt", fs, f"{BUCKET}/ckpt")
    download(folder, records, block, tmp_path)
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data
    assert (tmp_path / "empty.bin").read_bytes() == b""
    assert sorted(p.name for p in tmp_path.rglob(".*.part")) == []


def test_download_refuses_a_corrupt_block_and_a_changed_size(fs: Any, tmp_path: Path) -> None:
    block = 1 << 20
    data = os.urandom(3 * block)
    record = _stored(fs, "weights.bin", data, block)
    folder = RemoteFolder(f"s3://{BUCKET}/ckpt", fs, f"{BUCKET}/ckpt")
    corrupt = data[: 2 * block + 5] + bytes([data[2 * block + 5] ^ 1]) + data[2 * block + 6 :]
    fs.pipe_file(f"{BUCKET}/ckpt/weights.bin", corrupt)
    with pytest.raises(CheckpointError) as caught:
        download(folder, {"weights.bin": record}, block, tmp_path)
    assert str(caught.value) == (
        f"checkpoint file s3://{BUCKET}/ckpt/weights.bin is corrupt: its checksum is "
        f"{_digest(corrupt[2 * block :])} for bytes {2 * block}-{3 * block - 1} (block 2), "
        f"the manifest says {record.blocks[2]}."
    )
    assert not (tmp_path / "weights.bin").exists()
    fs.pipe_file(f"{BUCKET}/ckpt/weights.bin", data[:-1])
    with pytest.raises(CheckpointError, match=r"truncated or overwritten: 3145727 bytes, the "):
        download(folder, {"weights.bin": record}, block, tmp_path)
    assert not (tmp_path / "weights.bin").exists()


def _digest(data: bytes) -> str:
    checksums = BlockChecksums(len(data))
    checksums.update(data)
    return checksums.digests()[0]
