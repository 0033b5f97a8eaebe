"""The DeepSpeed ``GatheredParameters`` (reached as ``accel_ops.GatheredParameters``): it delegates
to ``deepspeed.zero.GatheredParameters`` for ZeRO-3 partitioned parameters only.

Moved from accel-ops' tests with the code (accel-ops names no engine); the assertions are the same.
"""

from __future__ import annotations

import contextlib
import sys
import types
from importlib import import_module
from pathlib import Path

import pytest
import torch

from accel_backends.deepspeed import gathered


def test_the_entry_point_names_this_context():
    # Read from pyproject.toml: an editable install keeps the entry points it was installed with.
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."accel.parameter_gatherers"]\n', 1)[1]
    line = next(line for line in section.splitlines() if line.startswith("deepspeed = "))
    module, _, name = line.split("=", 1)[1].strip().strip('"').partition(":")
    assert getattr(import_module(module), name) is gathered.GatheredParameters


def test_gathered_parameters_is_a_no_op_for_plain_parameters():
    model = torch.nn.Linear(2, 2)
    with gathered.GatheredParameters(model.parameters(), modifier_rank=0), torch.no_grad():
        model.weight.fill_(2.0)
    assert torch.equal(model.weight, torch.full((2, 2), 2.0))
    with gathered.GatheredParameters(model.weight):
        pass


@pytest.fixture
def fake_deepspeed(monkeypatch):
    calls = []

    @contextlib.contextmanager
    def zero_gathered(params, modifier_rank=None, fwd_module=None, enabled=True):
        calls.append(("enter", list(params), modifier_rank, fwd_module, enabled))
        yield
        calls.append(("exit",))

    module = types.ModuleType("deepspeed")
    module.zero = types.SimpleNamespace(GatheredParameters=zero_gathered)
    monkeypatch.setitem(sys.modules, "deepspeed", module)
    monkeypatch.setattr("accel_backends.deepspeed.gathered.is_deepspeed_available", lambda: True)
    return calls


def test_gathered_parameters_delegates_for_zero3_partitioned_parameters(fake_deepspeed):
    model = torch.nn.Linear(2, 2)
    model.weight.ds_id = 7  # what ZeRO-3 sets on a partitioned parameter
    with gathered.GatheredParameters(model.parameters(), modifier_rank=0, fwd_module=model):
        fake_deepspeed.append(("inside",))
    assert fake_deepspeed[0][0] == "enter"
    assert fake_deepspeed[0][1][0] is model.weight and len(fake_deepspeed[0][1]) == 2
    assert fake_deepspeed[0][2:] == (0, model, True)
    assert fake_deepspeed[1:] == [("inside",), ("exit",)]


def test_gathered_parameters_disabled_or_plain_does_not_call_deepspeed(fake_deepspeed):
    model = torch.nn.Linear(2, 2)
    with gathered.GatheredParameters(model.parameters()):
        pass
    model.weight.ds_id = 1
    with gathered.GatheredParameters(model.parameters(), enabled=False):
        pass
    assert fake_deepspeed == []
