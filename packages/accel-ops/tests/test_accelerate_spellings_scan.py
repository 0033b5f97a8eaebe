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


def test_accelerates_strategy_flags_choose_their_strategy_with_no_engine_installed(monkeypatch):
    # so that accel-core refuses the job, naming what to install, instead of it quietly running
    # another strategy
    monkeypatch.setattr(engine_description, "installed_engines", lambda: {})
    for flag, name in (
        ("ACCELERATE_USE_DEEPSPEED", "deepspeed"),
        ("ACCELERATE_USE_FSDP", "fsdp"),
        ("ACCELERATE_USE_MEGATRON_LM", "megatron_lm"),
    ):
        spelled = resolve({flag: "true"})
        assert spelled.values["ACCEL_STRATEGY"] == name
        assert spelled.sources["ACCEL_STRATEGY"] == flag
