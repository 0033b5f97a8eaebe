"""Config values a backend cannot store are converted, never a crash."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import numpy as np
import torch

from accel_core import LoggerType
from accel_core.tracking.config_values import flatten, number, to_json, to_scalar


class Colour(enum.Enum):
    RED = "red"


def test_flatten_joins_nested_keys_and_keeps_lists():
    assert flatten({"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "x": {}, "y": 1}) == {
        "optim.lr": 0.1,
        "optim.betas": [0.9, 0.99],
        "x": {},
        "y": 1,
    }
    assert flatten({1: {Colour.RED: 2}}) == {"1.red": 2}


def test_to_scalar_covers_every_kind():
    assert to_scalar(True) is True and to_scalar("s") == "s" and to_scalar(3) == 3
    assert to_scalar(None) == "None"
    assert to_scalar(Path("/data/x")) == "/data/x"
    assert to_scalar(LoggerType.WANDB) == "wandb" and to_scalar(Colour.RED) == "red"
    assert to_scalar([1, 2]) == "[1, 2]"
    assert json.loads(to_scalar({"b": None, "a": (1, Path("p"))})) == {"a": [1, "p"], "b": None}
    assert to_scalar(torch.tensor(2.5)) == 2.5 and to_scalar(np.int64(4)) == 4
    assert to_scalar(torch.ones(2)) == "[1.0, 1.0]"
    assert to_scalar(object).startswith("<class")


def test_to_json_is_loadable_and_keeps_nesting():
    value = {
        "a": (1, 2),
        "b": {3},
        "c": np.float32(0.5),
        "d": torch.arange(3),
        "e": None,
        Colour.RED: Path("x"),
    }
    converted = to_json(value)
    assert json.loads(json.dumps(converted)) == {
        "a": [1, 2],
        "b": [3],
        "c": 0.5,
        "d": [0, 1, 2],
        "e": None,
        "red": "x",
    }


def test_number_accepts_numbers_but_not_bools_or_big_tensors():
    assert number(1) == 1 and number(0.5) == 0.5 and number(np.float64(2.0)) == 2.0
    assert number(torch.tensor([3])) == 3 and number(np.array([1.5])) == 1.5
    assert number(True) is None and number("1") is None and number(torch.ones(2)) is None
