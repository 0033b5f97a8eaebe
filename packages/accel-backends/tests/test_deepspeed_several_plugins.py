"""Several DeepSpeed plugins in one Accelerator (Accelerate's ``deepspeed_plugins``) on 2 real
processes: the first is active, selecting another makes the next ``prepare`` build its engine from
that plugin's config, and a student trained under ZeRO-2 with a frozen ZeRO-3 teacher (the
multiple-model pattern of Accelerate's docs) trains exactly like DDP with a plain teacher."""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed")

import torch
from deepspeed_testing import FEATURE_WORKERS, results, run

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _largest_difference(left: dict, right: dict) -> float:
    assert left.keys() == right.keys()
    return max(float((left[k] - right[k]).abs().max()) for k in left)


def _active(name: str) -> dict:
    return {
        "active": name,  # get_active_deepspeed_plugin(accelerator.state)
        "state_plugin_is_active": True,  # accelerator.state.deepspeed_plugin
        "accelerator_plugin_is_active": True,  # accelerator.deepspeed_plugin
        "selected": [name],  # plugin.selected: the others were unselected
    }


def test_student_and_teacher_under_their_own_plugins(tmp_path):
    run("several_plugins", tmp_path, workers=FEATURE_WORKERS)
    found = results(tmp_path)
    tensors = torch.load(tmp_path / "weights.pt")
    assert found["first"] == _active("student")  # the first plugin given is the active one
    assert found["switched"] == _active("teacher")
    assert found["back"] == _active("student")
    # Each engine was built from the plugin active at its prepare() call.
    assert found["stages"] == [2, 3]
    # The teacher's "auto" micro-batch size came from the loader of the earlier prepare() call,
    # its accumulation steps from the Accelerator's (1).
    assert (found["teacher_micro"], found["teacher_gas"]) == (4, 1)
    assert "no DeepSpeed plugin called 'nobody'" in found["unknown"]
    assert "['student', 'teacher']" in found["unknown"]
    # Exact: the ZeRO-3 teacher gathers its full weights for each forward (the same math as the
    # plain module) and ZeRO-2 without accumulation adds the same two gradients as DDP (see
    # test_deepspeed_strategy_training); the teacher is never stepped.
    assert found["losses"] == found["ddp_losses"]
    assert _largest_difference(tensors["student"], tensors["ddp_student"]) == 0.0
    assert _largest_difference(tensors["teacher"], tensors["teacher_start"]) == 0.0
    assert found["losses"][-1] < found["losses"][1] / 2, found["losses"]
