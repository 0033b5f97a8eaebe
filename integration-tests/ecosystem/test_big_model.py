"""``from_pretrained(device_map=...)`` under accel's ``accelerate`` alias: transformers asks
``accelerate`` to parse ``max_memory``, to size layers, and to dispatch the model with CPU and disk
offload hooks (``jobs/device_map_job.py``; see its docstring for the cases).

The logits of every case are compared EXACTLY (tolerance 0.0, ``torch.equal``) with those of the
plain in-memory load: offloading moves weights, it does not change a single operation. With
``ACCEL_TEST_HF_PYTHON`` set, the job also runs under Accelerate, and the device maps and logits
must be the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from ecosystem_support import JOBS, from_accel, job_environment, run
from safetensors.torch import load_file

SCRIPT = str(JOBS / "device_map_job.py")
CASES = ["max_memory_text", "max_memory_int", "offload_buffers", "explicit_map"]
#: Cases of the job that check generation: prefetch settings, and tied embeddings.
PREFETCH_CASES = {"prefetch_thread": "thread", "prefetch_advise": "advise", "prefetch_off": None}


def load_job(python: str, assets: Path, root: Path, alias: bool) -> dict:
    out = root / "out"
    run(
        [python, SCRIPT, str(assets / "model"), str(out)],
        job_environment(root, alias=alias),
        SCRIPT,
    )
    return {
        "logits": load_file(out / "logits.safetensors"),
        "maps": json.loads((out / "maps.json").read_text()),
        "tokens": json.loads((out / "tokens.json").read_text()),
    }


@pytest.fixture(scope="module")
def accel_job(assets, tmp_path_factory) -> dict:
    return load_job(sys.executable, assets, tmp_path_factory.mktemp("device-map-accel"), alias=True)


@pytest.fixture(scope="module")
def accelerate_job(assets, hf_python, tmp_path_factory) -> dict:
    return load_job(
        hf_python, assets, tmp_path_factory.mktemp("device-map-accelerate"), alias=False
    )


@pytest.mark.parametrize("case", CASES)
def test_offloaded_logits_equal_the_plain_load(accel_job, case):
    assert torch.equal(accel_job["logits"][case], accel_job["logits"]["plain"]), case
    assert from_accel(accel_job["maps"][case]["hook"]), accel_job["maps"][case]


@pytest.mark.parametrize("case", [*CASES, *PREFETCH_CASES])
def test_offloaded_generation_equals_the_plain_model_token_for_token(accel_job, case):
    """Every generated token runs the offloaded layers again, from the same memory-mapped
    files: the tokens are the in-memory model's, with each prefetch setting."""
    assert accel_job["tokens"][case] == accel_job["tokens"]["plain"], case
    assert len(accel_job["tokens"]["plain"]) == 6


def test_prefetch_settings_reach_the_dispatched_model(accel_job):
    for case, mode in PREFETCH_CASES.items():
        assert accel_job["maps"][case]["prefetch"] == mode, case


def test_tied_embeddings_offloaded_to_disk(accel_job):
    maps = accel_job["maps"]["tied_disk"]["device_map"]
    assert "disk" in maps.values()
    logits = accel_job["logits"]
    assert torch.equal(logits["tied_disk"], logits["tied_plain"])
    assert not torch.equal(logits["tied_plain"], logits["plain"])  # the tie changed the model
    assert accel_job["tokens"]["tied_disk"] == accel_job["tokens"]["tied_plain"]


def test_device_maps_use_cpu_and_disk(accel_job):
    """``"310KB"`` and ``310_000`` are the same budget: the embeddings and the first layer on the
    CPU, the rest on disk; an explicit map is kept as given."""
    maps = {case: accel_job["maps"][case]["device_map"] for case in CASES}
    assert maps["max_memory_text"] == maps["max_memory_int"] == maps["offload_buffers"]
    assert maps["max_memory_text"]["model.layers.0"] == "cpu"
    assert maps["max_memory_text"]["model.layers.1"] == "disk"
    assert maps["explicit_map"] == {
        "model.embed_tokens": "cpu",
        "model.rotary_emb": "cpu",
        "model.layers.0": "cpu",
        "model.layers.1": "disk",
        "model.norm": "disk",
        "lm_head": "cpu",
    }


@pytest.mark.parametrize("case", ["plain", "tied_plain", *CASES, *PREFETCH_CASES, "tied_disk"])
def test_logits_and_maps_equal_accelerate(accel_job, accelerate_job, case):
    assert torch.equal(accel_job["logits"][case], accelerate_job["logits"][case]), case
    assert accel_job["tokens"][case] == accelerate_job["tokens"][case], case
    if case not in ("plain", "tied_plain"):
        mine, theirs = accel_job["maps"][case], accelerate_job["maps"][case]
        assert mine["device_map"] == theirs["device_map"], case
        assert theirs["hook"] == "accelerate.hooks.AlignDevicesHook", theirs
