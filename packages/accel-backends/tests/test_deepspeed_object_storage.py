"""The deepspeed strategy's checkpoints in object storage: 2 real processes (gloo, CPU) save
DeepSpeed's own files (every rank its ZeRO partitions) to a real S3-compatible server (moto's
server mode, a process of its own) and a fresh run loads them back and continues exactly."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("deepspeed")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

from deepspeed_testing import results, run_workers_with

from accel_testing.s3_server import S3Server

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_zero_checkpoints_go_to_a_bucket_and_continue_exactly(tmp_path):
    with S3Server() as server:
        fs = server.filesystem()
        fs.mkdir("deepspeed-tests")  # type: ignore[attr-defined]
        run_workers_with(
            "deepspeed_storage_workers.py",
            "save_to_bucket_and_continue",
            tmp_path,
            "deepspeed-tests",
            env=server.environment(),
        )
        for stage in (2, 3):
            folder = f"deepspeed-tests/zero{stage}"
            names = {key[len(folder) + 1 :] for key in fs.find(folder)}  # type: ignore[attr-defined]
            manifest = json.loads(fs.cat_file(f"{folder}/accel_checkpoint.json"))  # type: ignore[attr-defined]
            assert names == {*manifest["files"], "accel_checkpoint.json"}, stage
            optimizer_files = {n for n in names if n.endswith("optim_states.pt")}
            assert len(optimizer_files) == 2, names  # each rank uploaded its own partition
    found = results(tmp_path)
    for name in ("zero2", "zero3"):
        assert found[name]["loaded_equal"], name
        first, second = found[name]["losses"]
        assert first == second, name  # the fp32 master weights and Adam's moments came back
