"""accel-testing's strategy contract for the deepspeed strategy, on 2 real processes (gloo, CPU).

The checks run through ``accel_testing.strategy_contract.run_contract`` inside the workers, and
only those that fit an engine that owns clipping, its optimizer's state layout and (ZeRO-3) the
only full copy of the weights:

- ``clipping`` (ZeRO-2 and 3): DeepSpeed clips at the config's ``gradient_clipping`` inside its
  step; ``clip_grad_norm_`` returns the engine's norm and clips nothing (as in Accelerate), so the
  contract's "norm after clipping <= max_norm" can't hold, and ``p.grad`` is None under ZeRO.
- ``checkpoint_round_trip`` (ZeRO-2 and 3): the weights and schedule come back (tested in
  test_deepspeed_strategy_checkpoints.py), but the prepared optimizer's ``state_dict()`` is the
  ZeRO optimizer's own (``base_optimizer_state``, flat fp32 partitions), without torch's
  ``"state"`` key the check reads.
- ``step_changes_weights``, ``accumulation``, ``state_dict_round_trip`` (ZeRO-3): they compare
  ``get_state_dict`` on every process, and under ZeRO-3 the gathered weights exist on process 0
  only (DeepSpeed's consolidation, as in Accelerate); they pass there and fail on process 1.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("deepspeed")

from deepspeed_testing import run
from deepspeed_workers import CONTRACT_CHECKS

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_the_contract_checks_that_fit_pass_on_every_process(tmp_path):
    for result in run("contract", tmp_path):
        line = next(line for line in result.stdout.splitlines() if line.startswith("PASSED"))
        passed = {int(stage): names for stage, names in json.loads(line[len("PASSED ") :]).items()}
        assert passed == CONTRACT_CHECKS, result.rank
    assert CONTRACT_CHECKS[2] == [
        "joint_setup",
        "step_changes_weights",
        "accumulation",
        "state_dict_round_trip",
        "unwrap",
        "teardown",
    ]
