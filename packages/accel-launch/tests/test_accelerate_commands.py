"""Accelerate's ``accelerate.commands`` functions for config, env, estimate and test, and the
line of ``accel env`` that says whether ``import accelerate`` loads accel."""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from pathlib import Path

import pytest
import yaml
from conftest import clean_env, run_accel

from accel_launch import accelerate_alias
from accel_launch.commands import config_api, env_cmd, estimate_cmd
from accel_launch.commands import test_cmd as selftest_cmd
from accel_launch.config.files import save_config
from accel_launch.errors import ConfigError

#: Keys and values as ``accelerate config`` (Accelerate 1.15) writes them for FSDP 2 on 8 GPUs.
ACCELERATE_WRITTEN = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
dynamo_config:
  dynamo_backend: INDUCTOR
enable_cpu_affinity: false
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_version: 2
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


def test_default_config_file_is_a_path_string():
    assert isinstance(config_api.default_config_file, str)
    assert config_api.default_config_file.endswith("default_config.yaml")


def test_a_file_accelerate_wrote_reads_back_as_written(tmp_path: Path):
    path = tmp_path / "default_config.yaml"
    path.write_text(ACCELERATE_WRITTEN)
    loaded = config_api.load_config_from_file(str(path))
    assert loaded.to_dict() == yaml.safe_load(ACCELERATE_WRITTEN)
    assert loaded.to_dict()["downcast_bf16"] == "no"  # as written, not as accel reads it
    assert loaded.downcast_bf16 is False and loaded.distributed_type == "FSDP"
    assert loaded.fsdp_config["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    loaded.to_dict()["fsdp_config"]["fsdp_version"] = 1
    assert loaded.to_dict()["fsdp_config"]["fsdp_version"] == 2  # a copy each time


@pytest.mark.parametrize("name", ["written.yaml", "written.json"])
def test_a_file_accel_wrote_reads_back_as_written(tmp_path: Path, name: str):
    config = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "MULTI_CPU",
        "mixed_precision": "bf16",
        "num_processes": 4,
        "use_cpu": True,
        "deepspeed_config": {},
    }
    path = save_config(config, tmp_path / name)
    loaded = config_api.load_config_from_file(path)
    assert loaded.to_dict() == config
    assert loaded.path == str(path)
    assert loaded.num_machines == 1  # accel's default for a key the file leaves out


def test_none_reads_the_default_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "default.json"
    path.write_text(json.dumps({"distributed_type": "NO", "num_processes": 1}))
    monkeypatch.setattr(config_api, "default_config_file", str(path))
    assert config_api.load_config_from_file().to_dict() == {
        "distributed_type": "NO",
        "num_processes": 1,
    }


def test_a_missing_file_is_file_not_found_naming_it(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(FileNotFoundError, match=f"config file '{missing}' does not exist"):
        config_api.load_config_from_file(missing)


def test_a_bad_value_is_a_config_error_naming_it(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("distributed_type: MULTI_TPU\n")
    with pytest.raises(ConfigError, match="MULTI_TPU"):
        config_api.load_config_from_file(path)


def test_an_unknown_attribute_names_the_key(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("distributed_type: 'NO'\n")
    with pytest.raises(AttributeError, match="has no key 'megatron'"):
        _ = config_api.load_config_from_file(path).megatron


def test_config_parsers_write_and_update_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "made.yaml"
    parser = config_api.get_config_parser()
    args = parser.parse_args(["default", "--config_file", str(path), "--mixed_precision", "bf16"])
    assert (args.subcommand, args.save_location) == ("default", str(path))
    args.func(args)
    written = yaml.safe_load(path.read_text())
    assert written["mixed_precision"] == "bf16"
    path.write_text("distributed_type: 'NO'\nmixed_precision: fp16\n")
    args = parser.parse_args(["update", "--config_file", str(path)])
    args.func(args)
    updated = yaml.safe_load(path.read_text())
    assert updated["mixed_precision"] == "fp16" and updated["num_machines"] == 1
    out = capsys.readouterr().out
    assert f"saved at {path}" in out and f"updated at {path}" in out


def test_config_command_parser_on_subparsers():
    commands = argparse.ArgumentParser().add_subparsers()
    args = config_api.config_command_parser(commands).parse_args(["--config_file", "x.yaml"])
    assert (args.config_file, args.func) == ("x.yaml", config_api.config_command)


def _hook(origin: str | None) -> dict[str, types.ModuleType]:
    module = types.ModuleType("accel.as_accelerate")
    module.active_origin = lambda: origin  # type: ignore[attr-defined]
    return {"accel.as_accelerate": module}


@pytest.mark.parametrize(
    ("environ", "modules", "expected"),
    [
        ({}, {}, None),
        ({"ACCEL_AS_ACCELERATE": "0"}, {}, None),
        ({"ACCEL_AS_ACCELERATE": "On"}, {}, "ACCEL_AS_ACCELERATE=On in the environment"),
        ({"ACCEL_AS_ACCELERATE": "1", "ACCEL_AS_ACCELERATE_ORIGIN": "x"}, {}, "x"),
        ({}, _hook("the hook"), "the hook"),
        ({"ACCEL_AS_ACCELERATE": "1"}, _hook(None), None),  # the loaded hook decides
    ],
)
def test_who_switched_import_accelerate_on(environ, modules, expected):
    assert accelerate_alias.switched_on_by(environ, modules) == expected


def test_accel_env_says_whether_import_accelerate_loads_accel(tmp_path: Path):
    off = run_accel("env", env=clean_env(XDG_CONFIG_HOME=str(tmp_path)))
    assert off.returncode == 0, off.stderr
    assert (
        "- `import accelerate` loads accel: no (set ACCEL_AS_ACCELERATE=1 or run "
        "accel launch --as-accelerate)"
    ) in off.stdout.splitlines()
    on = run_accel(
        "env",
        env=clean_env(
            XDG_CONFIG_HOME=str(tmp_path),
            ACCEL_AS_ACCELERATE="1",
            ACCEL_AS_ACCELERATE_ORIGIN="accel launch --as-accelerate",
        ),
    )
    assert on.returncode == 0, on.stderr
    assert (
        "- `import accelerate` loads accel: yes (switched on by accel launch --as-accelerate)"
    ) in on.stdout.splitlines()


def test_env_command_prints_and_returns_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "c.yaml"
    path.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
    monkeypatch.setitem(sys.modules, "accel.as_accelerate", _hook("a test")["accel.as_accelerate"])
    args = env_cmd.env_command_parser().parse_args(["--config_file", str(path)])
    info = env_cmd.env_command(args)
    assert info["`import accelerate` loads accel"] == "yes (switched on by a test)"
    assert info[f"config file ({path})"] == {"distributed_type": "MULTI_CPU", "num_processes": 2}
    assert info["Python"].startswith(sys.version.split()[0])
    assert (
        "- `import accelerate` loads accel: yes (switched on by a test)" in capsys.readouterr().out
    )


def test_estimate_training_usage_by_precision():
    from accel_launch.estimate import estimate_training_usage

    assert estimate_training_usage(400, "float32") == {
        "model": 400,
        "optimizer": 800,
        "gradients": 400,
        "step": 1600,
    }
    assert estimate_training_usage(400, "bfloat16") == {
        "model": 400,
        "optimizer": 800,
        "gradients": 600,
        "step": 800,
    }
    assert set(estimate_training_usage(400, "int8").values()) == {-1}


@pytest.fixture
def tiny_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "tiny_model_for_estimate.py").write_text(
        "import torch\n\n\ndef build():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Linear(2, 1))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "tiny_model_for_estimate:build"


def test_gather_data_and_estimate_command(tiny_model: str, capsys: pytest.CaptureFixture[str]):
    parser = estimate_cmd.estimate_command_parser()
    args = parser.parse_args([tiny_model, "--dtypes", "float32", "float16"])
    assert args.model_name == tiny_model and args.func is estimate_cmd.estimate_command
    # Linear(4, 2): 10 parameters, the largest layer; Linear(2, 1): 3; 13 in all
    float32, float16 = estimate_cmd.gather_data(args)
    assert float32 == [
        "float32",
        40.0,
        52.0,
        {"model": 52, "optimizer": 104, "gradients": 52, "step": 208},
    ]
    assert float16 == [
        "float16",
        20.0,
        26.0,
        {"model": 52, "optimizer": 104, "gradients": 78, "step": 104},
    ]
    estimate_cmd.estimate_command(args)
    assert "| float16 | 20 B | 26 B | 104 B |" in capsys.readouterr().out


def test_create_ascii_table_boxes_title_headers_and_rows():
    table = estimate_cmd.create_ascii_table(["dtype", "Total"], [["float32", "1 GB"]], "Sizes")
    assert table.splitlines() == [
        "┌─────────────┐",
        "│    Sizes    │",
        "├───────┬─────┤",
        "│ dtype │Total│",
        "├───────┼─────┤",
        "│float32│ 1 GB│",
        "└───────┴─────┘",
    ]
    wide = estimate_cmd.create_ascii_table(["a", "b"], [["1", "2"]], "A long title here")
    assert wide.splitlines()[1:3] == ["│A long title here│", "├─┬───────────────┤"]


def test_create_ascii_table_rejects_a_row_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"row \['a'\] has 1 cells for 2 headers"):
        estimate_cmd.create_ascii_table(["x", "y"], [["a"]], "t")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_test_command_runs_the_self_check_and_returns(
    config_home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
):
    for name in [n for n in os.environ if n.startswith(("ACCEL_", "SLURM_"))]:
        monkeypatch.delenv(name)
    args = selftest_cmd.test_command_parser().parse_args(["--num_processes", "1"])
    assert args.func is selftest_cmd.test_command
    assert selftest_cmd.test_command(args) is None
    assert "accel test: all checks passed on 1 process." in capfd.readouterr().out


def test_env_lists_the_libraries_of_the_installed_engines(monkeypatch: pytest.MonkeyPatch):
    from accel_base.engine_description import EngineDescription
    from accel_launch.launch import engines

    def described(name: str, install: str) -> EngineDescription:
        return EngineDescription(name=name, title=name, strategy="m:S", install=install)

    installed = {
        "zero": described("zero", "accel-backends[deepspeed]"),  # its extra requires deepspeed
        "plain": described("plain", "accel-backends"),  # no extra: nothing of its own
        "gone": described("gone", "not-a-distribution[x]"),  # not installed: skipped
    }
    monkeypatch.setattr(engines, "installed", lambda: installed)
    assert env_cmd.engine_libraries() == ["deepspeed"]
