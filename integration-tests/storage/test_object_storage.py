"""Checkpoints in object storage, for real (``nox -s storage``): a real S3-compatible server
(moto's server mode, a process of its own speaking HTTP), jobs launched by ``accel launch`` on 2
CPU processes (gloo) whose project folder is ``s3://...``.

Each run is compared bit for bit (``torch.equal``) with the same job run without a fault; what the
bucket holds is read with s3fs (and safetensors' own reader for ``save_model``'s files).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from accel_testing.s3_server import S3Server  # noqa: E402

JOB = Path(__file__).with_name("storage_job.py")
BUCKET = "accel-tests"


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with S3Server() as running:
        running.filesystem().mkdir(BUCKET)  # type: ignore[attr-defined]
        yield running


def _accel() -> list[str]:
    script = Path(sys.executable).parent / "accel"
    return [str(script)] if script.exists() else [shutil.which("accel") or "accel"]


def _environment(server: S3Server) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCEL_", "RANK", "WORLD_", "TORCHELASTIC_", "AWS_"))
    }
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **server.environment()}


def _launch(
    server: S3Server, project: str, result: Path, *job_args: str
) -> subprocess.CompletedProcess[str]:
    command = [*_accel(), "launch", "--quiet", "--cpu", "--num_processes", "2", str(JOB)]
    command += ["--project", project, "--result", str(result), *job_args]
    return subprocess.run(
        command, env=_environment(server), capture_output=True, text=True, timeout=300
    )


def _result(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def _assert_same_weights(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(found[name], tensor), name


def _checkpoints(server: S3Server, run: str) -> dict[str, list[str]]:
    """``checkpoint_<n>`` -> the names of the objects under it, as the bucket lists them."""
    fs = server.filesystem()
    root = f"{BUCKET}/{run}/checkpoints"
    found: dict[str, list[str]] = {}
    for key in fs.find(root):  # type: ignore[attr-defined]
        folder, name = key[len(root) + 1 :].split("/", 1)
        found.setdefault(folder, []).append(name)
    return {folder: sorted(names) for folder, names in sorted(found.items())}


def _manifest(server: S3Server, folder: str) -> dict:
    return json.loads(server.filesystem().cat_file(f"{folder}/accel_checkpoint.json"))  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def reference(server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The job on 2 processes without a fault, checkpoints and save_model into the bucket."""
    result = tmp_path_factory.mktemp("reference") / "result.pt"
    run = _launch(
        server, f"s3://{BUCKET}/reference", result, "--save-model", f"s3://{BUCKET}/model"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return _result(result)


def test_rotation_keeps_total_limit_complete_checkpoints(server: S3Server, reference: dict) -> None:
    assert reference["step"] == 16  # 2 epochs of 8 steps; saves at 4, 8, 12, 16
    listing = _checkpoints(server, "reference")
    assert list(listing) == ["checkpoint_2", "checkpoint_3"]  # total_limit=2
    for folder, names in listing.items():
        manifest = _manifest(server, f"{BUCKET}/reference/checkpoints/{folder}")
        # the manifest lists exactly the other objects, with their sizes
        assert sorted(manifest["files"]) == [n for n in names if n != "accel_checkpoint.json"]
        fs = server.filesystem()
        for name, record in manifest["files"].items():
            size = fs.size(f"{BUCKET}/reference/checkpoints/{folder}/{name}")  # type: ignore[attr-defined]
            assert size == record["size"], name
        assert {"model.safetensors", "optimizer.bin", "random_states_1.pkl"} <= set(names)


def test_save_model_reads_back_through_safetensors(server: S3Server, reference: dict) -> None:
    from safetensors.torch import load

    fs = server.filesystem()
    index = json.loads(fs.cat_file(f"{BUCKET}/model/model.safetensors.index.json"))  # type: ignore[attr-defined]
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1  # max_shard_size=300 bytes: several shards, and the index
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        weights.update(load(fs.cat_file(f"{BUCKET}/model/{shard}")))  # type: ignore[attr-defined]
    _assert_same_weights(weights, reference["weights"])


@pytest.mark.parametrize("engine", ["ddp", "fsdp-async"])
def test_sigkill_during_an_upload_keeps_the_previous_checkpoint(
    engine: str, server: S3Server, reference: dict, tmp_path: Path
) -> None:
    project = f"s3://{BUCKET}/killed-{engine}"
    options = ("--fsdp", "--async-save") if engine == "fsdp-async" else ()
    expected = reference["weights"]
    if engine == "fsdp-async":  # FSDP2's reduction order: its own uninterrupted reference
        clean = _launch(server, f"s3://{BUCKET}/clean-{engine}", tmp_path / "clean.pt", *options)
        assert clean.returncode == 0, clean.stderr[-3000:]
        expected = _result(tmp_path / "clean.pt")["weights"]

    # rank 0 dies during its 3rd save (step 12), once its first file is in the bucket
    killed = _launch(server, project, tmp_path / "killed.pt", *options, "--kill-in-save", "3")
    assert killed.returncode != 0
    listing = _checkpoints(server, f"killed-{engine}")
    assert list(listing) == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    assert "accel_checkpoint.json" in listing["checkpoint_1"]
    assert listing["checkpoint_2"], "the killed save uploaded nothing: the test proves nothing"
    assert "accel_checkpoint.json" not in listing["checkpoint_2"]
    if engine == "fsdp-async":  # every process uploaded its own shards
        shards = [n for n in listing["checkpoint_1"] if n.endswith(".distcp")]
        assert {n.split("/")[-1] for n in shards} >= {"__0_0.distcp", "__1_0.distcp"}

    # the same command again: load_state() picks checkpoint_1 (step 8), not the partial one
    resumed = _launch(server, project, tmp_path / "resumed.pt", *options)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = _result(tmp_path / "resumed.pt")
    assert result["step"] == 16
    _assert_same_weights(result["weights"], expected)
    listing = _checkpoints(server, f"killed-{engine}")
    assert list(listing) == ["checkpoint_2", "checkpoint_3"]
    assert all("accel_checkpoint.json" in names for names in listing.values())
    if engine == "fsdp-async":  # the last checkpoint (step 16) merged from the bucket into it
        _assert_merges_from_the_bucket(server, f"{project}/checkpoints/checkpoint_3", result)


def _assert_merges_from_the_bucket(server: S3Server, checkpoint: str, result: dict) -> None:
    from safetensors.torch import load

    shards, merged = f"{checkpoint}/pytorch_model_fsdp_0", f"s3://{BUCKET}/merged"
    command = [*_accel(), "merge-weights", shards, merged]
    run = subprocess.run(command, env=_environment(server), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == f"accel merge-weights: wrote {merged}/model.safetensors"
    data = server.filesystem().cat_file(f"{BUCKET}/merged/model.safetensors")  # type: ignore[attr-defined]
    _assert_same_weights(load(data), result["weights"])


SINGLE_PROCESS = """
import faulthandler
faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where, on stderr
import os, sys, torch
from accel_core import Accelerator, ProjectConfiguration
endpoint, cwd = sys.argv[1], os.getcwd()
options = {"endpoint_url": endpoint, "key": "accel-testing", "secret": "accel-testing"}
config = ProjectConfiguration(project_dir="s3://accel-tests/options", storage_options=options)
accelerator = Accelerator(project_config=config)
torch.manual_seed(0)
model = accelerator.prepare(torch.nn.Linear(3, 2))
saved = {k: v.clone() for k, v in model.state_dict().items()}
print(accelerator.save_state("s3://accel-tests/options/step1"))
with torch.no_grad():
    model.weight.zero_()
accelerator.load_state("s3://accel-tests/options/step1")
assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
assert os.listdir(cwd) == [], os.listdir(cwd)
print("ok")
"""


def test_storage_options_give_the_endpoint(server: S3Server, tmp_path: Path) -> None:
    # no AWS_* variables at all: the endpoint and keys come from storage_options only
    env = {k: v for k, v in _environment(server).items() if not k.startswith("AWS_")}
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    run = subprocess.run(
        [sys.executable, "-c", SINGLE_PROCESS, server.endpoint],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["s3://accel-tests/options/step1", "ok"]
    listing = server.filesystem().find(f"{BUCKET}/options/step1")  # type: ignore[attr-defined]
    assert f"{BUCKET}/options/step1/accel_checkpoint.json" in listing
