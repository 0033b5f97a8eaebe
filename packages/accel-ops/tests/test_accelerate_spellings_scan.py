"""The engines' Accelerate spellings are read from the entry points only when they may apply."""

from accel_base import engine_description
from accel_ops.accelerate_spellings import resolve


def test_a_process_with_only_accels_variables_reads_no_entry_points(monkeypatch):
    calls = []

    def counting():
        calls.append(1)
        return {}

    monkeypatch.setattr(engine_description, "installed_engines", counting)
    resolve({"ACCEL_STRATEGY": "deepspeed", "ACCEL_MIXED_PRECISION": "bf16", "PATH": "/bin"})
    resolve({"ACCEL_STRATEGY": "fsdp", "ACCEL_STRATEGY_CONFIG": "{}", "FSDP_VERSION": "2"})
    resolve({"LOCAL_RANK": "0"})
    assert calls == []
    resolve({"ACCELERATE_USE_FSDP": "true"})
    assert calls
