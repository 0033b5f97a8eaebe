"""accel's device maps are Accelerate's: checked on the committed table, and live when asked.

``accelerate_device_maps.json`` holds Accelerate 1.15's results (device maps, and the
``max_memory`` of ``get_balanced_memory`` for the "balanced" cases) on many budgets with several
GPU indices, the CPU and the disk; ``generate_accelerate_maps.py --write`` regenerates it. With
``ACCEL_TEST_HF_PYTHON`` pointing at a Python that has accelerate, the same cases also run there
now and accel is compared with what it answers.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest
from device_map_parity_cases import (
    DEVIATIONS,
    MODELS,
    build,
    describe,
    run_case,
    spec_hash,
    transformers_available,
)
from torch import nn

import accel_bigmodel
from accel_bigmodel import check_device_map

TABLE = json.loads((Path(__file__).parent / "accelerate_device_maps.json").read_text())
CASES = {case["id"]: case for case in TABLE["cases"]}

# What accel gives where it does not follow Accelerate on purpose (reasons in DEVIATIONS).
OURS = {
    # 1.scale is placed with the part of module 1 that comes last (1.b, on the CPU).
    "buffer_split-split": {"0": 0, "1.a": 0, "1.b": "cpu", "1.scale": "cpu", "2": "cpu"},
    # module 10 holds the other name of 1.weight: it goes with module 1, nothing else does.
    "substring_ties-two_gpus": {
        "0": 0,
        "1": 0,
        "10": 0,
        "2": 0,
        "3": 1,
        "4": 1,
        "5": 1,
        "6": 1,
        "7": 1,
        "8": "cpu",
        "9": "cpu",
        "11": "cpu",
    },
}


@cache
def _model(key: str) -> nn.Module:
    if MODELS[key][1] and not transformers_available():
        pytest.skip("transformers is not installed")
    model = build(key)
    if spec_hash(describe(model)) != TABLE["models"][key]:
        pytest.skip(
            f"{key} is built differently here than when the table was computed "
            f"(transformers {TABLE['transformers_version']}): regenerate the table"
        )
    return model


def test_the_table_covers_what_it_should():
    several_gpus = [
        c for c in CASES.values() if sum(isinstance(d, int) for d, _ in c["max_memory"]) >= 2
    ]
    assert len(CASES) >= 100 and len(several_gpus) >= 60
    assert any(d == "disk" for c in several_gpus for d, _ in c["max_memory"])
    assert sum("no_split_module_classes" in c for c in CASES.values()) >= 20
    assert {c["kind"] for c in CASES.values()} == {"infer", "balanced", "balanced_low_0"}
    assert set(DEVIATIONS) == set(OURS) == {c for c in CASES if "deviation" in CASES[c]}


@pytest.mark.parametrize("case_id", [c for c in CASES if "deviation" not in CASES[c]])
def test_same_result_as_accelerate(case_id):
    case = CASES[case_id]
    model = _model(case["model"])
    assert run_case(case, model, accel_bigmodel) == case["accelerate"]


@pytest.mark.parametrize("case_id", sorted(OURS))
def test_deliberate_deviations(case_id):
    case = CASES[case_id]
    model = _model(case["model"])
    ours = run_case(case, model, accel_bigmodel)
    assert ours == {"device_map": OURS[case_id]}
    assert ours != case["accelerate"]
    check_device_map(model, OURS[case_id])  # every tensor has a device


def test_buffer_split_deviation_is_what_accelerate_recorded():
    # Accelerate's map for this case leaves the buffer 1.scale without a device.
    recorded = CASES["buffer_split-split"]["accelerate"]["device_map"]
    assert recorded == {"0": 0, "1.a": 0, "1.b": "cpu", "2": "cpu"}
    assert CASES["substring_ties-two_gpus"]["accelerate"] == {"error": "IndexError"}


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ACCEL_TEST_HF_PYTHON"),
    reason="set ACCEL_TEST_HF_PYTHON to a Python that has accelerate to compare live",
)
def test_same_results_as_accelerate_live():
    from device_map_parity_cases import cases
    from generate_accelerate_maps import accelerate_results, build_models

    models = build_models()
    todo = cases(models)
    _, theirs = accelerate_results(os.environ["ACCEL_TEST_HF_PYTHON"], models, todo)
    differ = {}
    for case in todo:
        ours = run_case(case, models[case["model"]], accel_bigmodel)
        expected = {"device_map": OURS[case["id"]]} if "deviation" in case else theirs[case["id"]]
        if ours != expected:
            differ[case["id"]] = (ours, theirs[case["id"]])
    assert not differ
    assert len(todo) >= 100
