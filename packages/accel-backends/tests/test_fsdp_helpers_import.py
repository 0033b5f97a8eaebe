"""Accelerate's FSDP helper names (``accelerate.utils.fsdp_utils``, which transformers' Trainer
imports in every process) load the helpers' own modules, not the fsdp strategy: a Trainer that
never shards does not pay for the engine."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(done.stdout.split())


def test_the_checkpoint_helpers_do_not_import_the_strategy():
    loaded = _modules_after(
        "from accel_backends import load_fsdp_model, save_fsdp_model, merge_fsdp_weights"
    )
    assert "accel_backends.fsdp.strategy_calls" in loaded
    engine = {
        "accel_backends.fsdp.strategy",
        "accel_backends.fsdp.plugin",
        "accel_backends.fsdp.sharding",
        "accel_backends.fsdp.v1_wrapping",
    }
    # (the calls themselves, which import these, run for real in test_fsdp_strategy_calls.py)
    assert loaded & engine == set()
