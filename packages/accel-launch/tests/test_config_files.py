"""Config files: Accelerate's files load as they are, round-trip, and bad ones fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from accel_launch import (
    ConfigError,
    default_config_file,
    load_config,
    save_config,
    write_basic_config,
)
from accel_launch.config.files import update_config

ALL_FIXTURES = sorted(FIXTURES.glob("*.yaml"))


def test_there_is_a_fixture_per_distributed_type():
    kinds = {load_config(path).get("distributed_type") for path in ALL_FIXTURES}
    assert kinds == {"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP", "XLA"}


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.stem)
def test_fixture_round_trips(path: Path, tmp_path: Path):
    first = load_config(path)
    written = save_config(first, tmp_path / "again.yaml")
    assert load_config(written) == first
    as_json = save_config(first, tmp_path / "again.json")
    assert json.loads(as_json.read_text()) == first
    assert load_config(as_json) == first


def test_accelerate_generated_file_is_read_with_its_values():
    # written by /work/hfvenv/bin/accelerate config default (JSON text, a YAML subset)
    config = load_config(FIXTURES / "hf_default.yaml")
    assert config["distributed_type"] == "NO"
    assert config["use_cpu"] is True
    assert config["num_processes"] == 1
    assert config["rdzv_backend"] == "static"


def test_older_accelerate_values_are_understood():
    config = load_config(FIXTURES / "fsdp_v1_old.yaml")
    assert config["downcast_bf16"] is False  # 'no'
    assert config["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"  # 1
    assert config["megatron_lm_config"] == {}


def test_case_of_choices_is_normalised(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("distributed_type: multi_cpu\nmixed_precision: BF16\n")
    assert load_config(path) == {"distributed_type": "MULTI_CPU", "mixed_precision": "bf16"}


def test_unknown_key_names_the_nearest_valid_one(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("num_processs: 2\n")
    with pytest.raises(
        ConfigError, match=r"unknown key 'num_processs'.*Did you mean 'num_processes'"
    ):
        load_config(path)


def test_several_unknown_keys_are_all_listed(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("num_processs: 2\nmixed_precison: fp16\nzzz: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "'num_processs' (did you mean 'num_processes'?)" in message
    assert "'mixed_precison' (did you mean 'mixed_precision'?)" in message
    assert "'zzz'," in message or "'zzz'." in message


def test_unknown_nested_key_names_the_section(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_ofload_params: true\n")
    with pytest.raises(
        ConfigError, match=r"'fsdp_config.fsdp_ofload_params'.*'fsdp_config.fsdp_offload_params'"
    ):
        load_config(path)


def test_wrong_value_names_key_value_and_choices(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("mixed_precision: fp8\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "mixed_precision='fp8'" in message
    assert "no, fp16, bf16" in message
    path.write_text("num_processes: many\n")
    with pytest.raises(ConfigError, match=r"num_processes='many'.*integer"):
        load_config(path)
    path.write_text("use_cpu: perhaps\n")
    with pytest.raises(ConfigError, match=r"use_cpu='perhaps'.*true or false"):
        load_config(path)


def test_out_of_scope_sections_must_be_empty(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("megatron_lm_config:\n  megatron_lm_tp_degree: 2\n")
    with pytest.raises(ConfigError, match=r"megatron_lm_config.*not supported"):
        load_config(path)


def test_only_safe_yaml_is_read(tmp_path: Path):
    path = tmp_path / "evil.yaml"
    path.write_text("num_processes: !!python/object/apply:os.getcwd []\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_missing_file_says_how_to_make_one(tmp_path: Path):
    with pytest.raises(ConfigError, match="accel config default"):
        load_config(tmp_path / "nope.yaml")


def test_default_location_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ACCEL_CONFIG_FILE", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert default_config_file() == Path.home() / ".config" / "accel" / "default_config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_config_file() == tmp_path / "accel" / "default_config.yaml"
    monkeypatch.setenv("ACCEL_CONFIG_FILE", str(tmp_path / "x.yaml"))
    assert default_config_file() == tmp_path / "x.yaml"


def test_write_basic_config_writes_once(config_home: Path, capsys: pytest.CaptureFixture[str]):
    path = write_basic_config(mixed_precision="bf16")
    assert path == config_home / "accel" / "default_config.yaml"
    config = load_config(path)
    assert config["mixed_precision"] == "bf16"
    assert config["compute_environment"] == "LOCAL_MACHINE"
    assert config["num_processes"] >= 1
    assert write_basic_config(save_location=path) is False
    assert "already exists" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="mixed_precision='fp9'"):
        write_basic_config("fp9", save_location=config_home / "other.yaml")


def test_update_renames_old_keys_and_fills_defaults(tmp_path: Path):
    path = tmp_path / "old.yaml"
    path.write_text((FIXTURES / "fsdp_v1_old.yaml").read_text())
    update_config(path)
    config = load_config(path)
    assert config["fsdp_config"]["fsdp_backward_prefetch"] == "BACKWARD_PRE"
    assert "fsdp_backward_prefetch_policy" not in config["fsdp_config"]
    assert config["rdzv_backend"] == "static"
    assert config["num_processes"] == 2  # kept
