"""Accelerate's ParallelismConfig at launch: the ``parallelism_config`` config-file section, the
``--use_parallelism_config`` and ``--parallelism_config_*`` flags, and the ``PARALLELISM_CONFIG_*``
variables the workers get on every launch path."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
from conftest import clean_env, run_accel

from accel_launch import (
    AccelLaunchError,
    ConfigError,
    load_config,
    prepare_deepspeed_cmd_env,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)
from accel_launch.cli import build_parser

#: Prints what a worker sees of ParallelismConfig's variables, one JSON object per rank.
PRINT_ENV = """\
import json, os
seen = {k: v for k, v in os.environ.items()
        if k.startswith("PARALLELISM_CONFIG_") or k == "ACCELERATE_USE_PARALLELISM_CONFIG"}
print("RANK", os.environ.get("RANK", "0"), json.dumps(seen, sort_keys=True), flush=True)
"""

#: A config file with a section, values as a user might write them (to be coerced).
SECTION_CONFIG = """\
distributed_type: MULTI_CPU
num_processes: 2
use_cpu: true
parallelism_config:
  parallelism_config_dp_replicate_size: 1
  parallelism_config_dp_shard_size: '2'
  parallelism_config_tp_size: 1
  parallelism_config_cp_size: 2
  parallelism_config_cp_backend: TORCH
  parallelism_config_cp_comm_strategy: AllToAll
  parallelism_config_sp_seq_length_is_variable: 'false'
"""

#: The variables of the section above, with Accelerate's defaults for the rest.
SECTION_VARIABLES = {
    "ACCELERATE_USE_PARALLELISM_CONFIG": "true",
    "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "1",
    "PARALLELISM_CONFIG_DP_SHARD_SIZE": "2",
    "PARALLELISM_CONFIG_TP_SIZE": "1",
    "PARALLELISM_CONFIG_CP_SIZE": "2",
    "PARALLELISM_CONFIG_CP_BACKEND": "torch",
    "PARALLELISM_CONFIG_CP_COMM_STRATEGY": "alltoall",
    "PARALLELISM_CONFIG_SP_SIZE": "1",
    "PARALLELISM_CONFIG_SP_BACKEND": "deepspeed",
    "PARALLELISM_CONFIG_PP_SIZE": "1",  # declared by the fsdp engine (accel-backends)
    "PARALLELISM_CONFIG_EP_SIZE": "1",  # the fsdp engine's too
}


pytestmark = pytest.mark.usefixtures("no_launch_variables")


def accel_env(**extra: str) -> dict[str, str]:
    return clean_env(
        CUDA_VISIBLE_DEVICES="", XDG_CONFIG_HOME=os.environ["XDG_CONFIG_HOME"], **extra
    )


def dry_run(*argv: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The resolved rows (name -> value and source words) and the worker environment that
    `accel launch --dry-run ARGV` prints."""
    done = run_accel("launch", "--dry-run", *argv, env=accel_env())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows_start = lines.index("resolved configuration (value, source):") + 1
    env_start = lines.index("worker environment (set by accel launch):") + 1
    rows = {}
    for line in lines[rows_start:]:
        if not line.startswith("  "):
            break
        name, *rest = line.split()
        rows[name] = rest
    env = {}
    for line in lines[env_start:]:
        if not line.startswith("  "):
            break
        key, _, value = line.strip().partition("=")
        env[key] = value
    return rows, env


def parallelism_variables(env: dict[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in env.items()
        if key.startswith("PARALLELISM_CONFIG_") or key == "ACCELERATE_USE_PARALLELISM_CONFIG"
    }


def launch_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["launch", *argv])


def test_section_is_read_and_its_values_coerced(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text(SECTION_CONFIG + "  parallelism_config_sp_seq_length: 4096\n")
    assert load_config(path)["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 1,
        "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 1,
        "parallelism_config_cp_size": 2,
        "parallelism_config_cp_backend": "torch",
        "parallelism_config_cp_comm_strategy": "alltoall",
        "parallelism_config_sp_seq_length_is_variable": False,
        "parallelism_config_sp_seq_length": 4096,
    }


def test_unknown_key_in_the_section_is_named(tmp_path: Path):
    path = tmp_path / "typo.yaml"
    path.write_text("parallelism_config:\n  parallelism_config_tp_sise: 2\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert "unknown key 'parallelism_config.parallelism_config_tp_sise'" in message
    assert "Did you mean 'parallelism_config.parallelism_config_tp_size'?" in message
    done = run_accel("launch", "--config_file", str(path), "x.py", env=accel_env())
    assert done.returncode == 2
    assert "parallelism_config_tp_sise" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("parallelism_config_tp_size: 0", "parallelism_config.parallelism_config_tp_size=0"),
        ("parallelism_config_dp_shard_size: two", "parallelism_config_dp_shard_size='two'"),
        ("parallelism_config_cp_backend: ring", "one of torch"),
    ],
)
def test_bad_values_in_the_section_are_named(tmp_path: Path, line: str, expected: str):
    path = tmp_path / "bad.yaml"
    path.write_text(f"parallelism_config:\n  {line}\n")
    with pytest.raises(ConfigError, match="is not allowed") as raised:
        load_config(path)
    assert expected in str(raised.value)


def test_section_turns_it_on_and_the_workers_get_its_variables(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text(SECTION_CONFIG)
    rows, env = dry_run("--config_file", str(path), "train.py")
    assert rows["use_parallelism_config"][:2] == ["True", "config"]
    assert rows["parallelism_config_dp_shard_size"] == ["2", "config", "file", str(path)]
    assert rows["parallelism_config_tp_size"] == ["1", "config", "file", str(path)]
    assert rows["parallelism_config_dp_replicate_size"] == ["1", "config", "file", str(path)]
    assert rows["parallelism_config_sp_size"] == ["1", "default"]
    assert parallelism_variables(env) == SECTION_VARIABLES
    assert env["ACCEL_STRATEGY"] == "ddp"  # data parallel only: DDP, not refused


def test_flags_override_the_section(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text(SECTION_CONFIG)
    rows, env = dry_run(
        "--config_file",
        str(path),
        *("--parallelism_config_dp_shard_size", "1"),
        *("--parallelism_config_dp_replicate_size", "2"),
        *("--parallelism_config_cp_size", "1"),
        "train.py",
    )
    assert rows["parallelism_config_dp_shard_size"] == ["1", "flag"]
    assert rows["parallelism_config_dp_replicate_size"] == ["2", "flag"]
    assert rows["parallelism_config_cp_comm_strategy"] == ["alltoall", "config", "file", str(path)]
    assert parallelism_variables(env) == {
        "ACCELERATE_USE_PARALLELISM_CONFIG": "true",
        "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "2",
        "PARALLELISM_CONFIG_DP_SHARD_SIZE": "1",
        "PARALLELISM_CONFIG_TP_SIZE": "1",
        "PARALLELISM_CONFIG_CP_SIZE": "1",  # no communication strategy with cp_size 1
        "PARALLELISM_CONFIG_CP_BACKEND": "torch",
        "PARALLELISM_CONFIG_SP_SIZE": "1",
        "PARALLELISM_CONFIG_SP_BACKEND": "deepspeed",
        "PARALLELISM_CONFIG_PP_SIZE": "1",
        "PARALLELISM_CONFIG_EP_SIZE": "1",
    }


def test_a_size_flag_implies_use_parallelism_config_and_sp_options_follow_sp_size():
    rows, env = dry_run(
        "--cpu",
        *("--parallelism_config_tp_size", "2"),
        *("--parallelism_config_sp_size", "4"),
        *("--parallelism_config_sp_seq_length", "2048"),
        *("--parallelism_config_sp_seq_length_is_variable", "false"),
        *("--parallelism_config_sp_attn_implementation", "flash_attention_2"),
        "train.py",
    )
    assert rows["use_parallelism_config"] == [
        "True",
        "implied",
        "by",
        "--parallelism_config_tp_size",
    ]
    variables = parallelism_variables(env)
    assert variables["PARALLELISM_CONFIG_TP_SIZE"] == "2"
    assert variables["PARALLELISM_CONFIG_SP_SIZE"] == "4"
    assert variables["PARALLELISM_CONFIG_SP_SEQ_LENGTH"] == "2048"
    assert variables["PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE"] == "False"
    assert variables["PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"] == "flash_attention_2"
    assert "PARALLELISM_CONFIG_CP_COMM_STRATEGY" not in variables


def test_without_it_there_are_no_variables(tmp_path: Path):
    rows, env = dry_run("--cpu", "train.py")
    assert rows["use_parallelism_config"] == ["False", "default"]
    assert parallelism_variables(env) == {}
    empty = tmp_path / "empty_section.yaml"
    empty.write_text("parallelism_config: {}\n")  # as Accelerate writes it when unused
    rows, env = dry_run("--config_file", str(empty), "--cpu", "train.py")
    assert rows["use_parallelism_config"] == ["False", "default"]
    assert parallelism_variables(env) == {}


def test_use_flag_alone_gives_accelerates_defaults():
    _, env = dry_run("--cpu", "--use_parallelism_config", "train.py")
    assert parallelism_variables(env) == {
        "ACCELERATE_USE_PARALLELISM_CONFIG": "true",
        "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "1",
        "PARALLELISM_CONFIG_DP_SHARD_SIZE": "1",
        "PARALLELISM_CONFIG_TP_SIZE": "1",
        "PARALLELISM_CONFIG_CP_SIZE": "1",
        "PARALLELISM_CONFIG_CP_BACKEND": "torch",
        "PARALLELISM_CONFIG_SP_SIZE": "1",
        "PARALLELISM_CONFIG_SP_BACKEND": "deepspeed",
        "PARALLELISM_CONFIG_PP_SIZE": "1",
        "PARALLELISM_CONFIG_EP_SIZE": "1",
    }


@pytest.mark.parametrize(
    ("flags", "strategy"),
    [(("--use_deepspeed",), "deepspeed"), (("--use_fsdp", "--fsdp_version", "1"), "fsdp")],
)
def test_any_strategy_takes_it(flags: tuple[str, ...], strategy: str):
    """Accelerate refuses it without --use_fsdp --fsdp_version 2; accel leaves it to the worker."""
    rows, env = dry_run(
        *("--cpu", "--num_processes", "2", *flags),
        *("--parallelism_config_dp_shard_size", "2", "t.py"),
    )
    assert rows["strategy"] == [strategy, "flag"]
    assert env["ACCEL_STRATEGY"] == strategy
    assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"


def test_with_no_strategy_named_the_workers_choose_from_the_dimensions():
    # ddp for dp_replicate alone, fsdp for dp_shard or tp: the worker's Accelerator decides
    rows, env = dry_run(
        "--cpu", "--num_processes", "4", "--parallelism_config_tp_size", "2", "t.py"
    )
    assert rows["strategy"] == ["(the", "workers", "choose)", "parallelism_config's", "dimensions"]
    assert "ACCEL_STRATEGY" not in env
    assert rows["distributed_type"][0] == "MULTI_CPU"
    rows, env = dry_run("--cpu", "--num_processes", "2", "t.py")  # without it: ddp, as before
    assert env["ACCEL_STRATEGY"] == "ddp"
    assert not any(name.startswith("parallelism_config_") for name in rows)


@pytest.mark.parametrize(
    ("value", "says"),
    [("0", "0 is below 1; expected an integer >= 1"), ("two", "'two' is not an integer")],
)
def test_a_bad_size_flag_is_an_error_naming_the_option(tmp_path: Path, value: str, says: str):
    marker = tmp_path / "started"
    script = tmp_path / "touch.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = run_accel(
        "launch", "--cpu", "--parallelism_config_cp_size", value, str(script), env=accel_env()
    )
    assert done.returncode == 2
    assert "argument --parallelism_config_cp_size" in done.stderr and says in done.stderr
    assert not marker.exists()  # nothing started


def test_a_bad_size_from_another_parser_is_an_error_naming_the_option():
    args = launch_args("--cpu", "train.py")
    args.parallelism_config_tp_size = 0  # as a namespace built by other code may hold it
    with pytest.raises(AccelLaunchError, match=r"--parallelism_config_tp_size 0 \(flag\)"):
        prepare_simple_launcher_cmd_env(args)


def test_every_helper_gives_the_variables(tmp_path: Path):
    argv = ("--cpu", "--parallelism_config_dp_shard_size", "2", "--parallelism_config_cp_size", "2")
    expected = {
        **SECTION_VARIABLES,
        "PARALLELISM_CONFIG_CP_COMM_STRATEGY": "allgather",
    }
    _, single = prepare_simple_launcher_cmd_env(launch_args(*argv, "train.py"))
    multi = prepare_multi_gpu_env(launch_args(*argv, "--num_processes", "2", "train.py"))
    _, deepspeed = prepare_deepspeed_cmd_env(launch_args(*argv, "--num_processes", "2", "t.py"))
    for env in (single, multi, deepspeed):
        assert parallelism_variables(env) == expected
    # the config file's section reaches them too, a flag the namespace does not set included
    path = tmp_path / "c.yaml"
    path.write_text(SECTION_CONFIG)
    multi = prepare_multi_gpu_env(launch_args("--config_file", str(path), "train.py"))
    assert parallelism_variables(multi) == SECTION_VARIABLES


def test_accelerates_namespace_with_its_defaults_does_not_turn_it_on():
    """Accelerate's parser sets every parallelism_config_* field (to 1, torch, ...) and
    use_parallelism_config=False: that is not a request for ParallelismConfig."""
    fields = {
        "training_script": "train.py",
        "training_script_args": [],
        "cpu": True,
        "use_parallelism_config": False,
        "parallelism_config_dp_replicate_size": 1,
        "parallelism_config_dp_shard_size": 1,
        "parallelism_config_tp_size": 1,
        "parallelism_config_cp_size": 1,
        "parallelism_config_cp_backend": "torch",
        "parallelism_config_cp_comm_strategy": "allgather",
        "parallelism_config_sp_size": 1,
        "parallelism_config_sp_backend": "deepspeed",
        "parallelism_config_sp_seq_length": None,
        "parallelism_config_sp_seq_length_is_variable": True,
        "parallelism_config_sp_attn_implementation": "sdpa",
    }
    _, env = prepare_simple_launcher_cmd_env(argparse.Namespace(**fields))
    assert parallelism_variables(env) == {}
    fields.update(use_parallelism_config=True, parallelism_config_dp_shard_size=2)
    _, env = prepare_simple_launcher_cmd_env(argparse.Namespace(**fields))
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"


def _printed(stdout: str) -> dict[str, dict[str, str]]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("RANK "):
            _, rank, text = line.split(" ", 2)
            found[rank] = json.loads(text)
    return found


def test_a_launched_process_sees_the_variables(tmp_path: Path):
    script = tmp_path / "print_env.py"
    script.write_text(PRINT_ENV)
    path = tmp_path / "c.yaml"
    path.write_text(SECTION_CONFIG.replace("num_processes: 2", "num_processes: 1"))
    done = run_accel(
        "launch",
        *("--config_file", str(path)),
        *("--cpu", "--num_processes", "1"),
        *("--parallelism_config_tp_size", "3"),
        str(script),
        env=accel_env(),
    )
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout) == {"0": {**SECTION_VARIABLES, "PARALLELISM_CONFIG_TP_SIZE": "3"}}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_launched_processes_see_the_variables(tmp_path: Path):
    script = tmp_path / "print_env.py"
    script.write_text(PRINT_ENV)
    done = run_accel(
        "launch",
        *("--cpu", "--num_processes", "2", "--use_parallelism_config"),
        *("--parallelism_config_dp_replicate_size", "2"),
        *("--log-dir", str(tmp_path / "logs")),
        str(script),
        env=accel_env(),
    )
    assert done.returncode == 0, done.stderr
    logs = "".join(
        path.read_text() for path in sorted((tmp_path / "logs").rglob("*")) if path.is_file()
    )
    seen = _printed(done.stdout + logs)
    assert set(seen) == {"0", "1"}
    for variables in seen.values():
        assert variables["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
        assert variables["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
        assert variables["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "1"


def test_help_has_the_group_and_every_option():
    done = run_accel("launch", "--help", env=accel_env())
    assert done.returncode == 0
    assert "ParallelismConfig (any --parallelism_config_* option implies" in done.stdout
    for name in (
        "use_parallelism_config",
        "parallelism_config_dp_replicate_size",
        "parallelism_config_dp_shard_size",
        "parallelism_config_tp_size",
        "parallelism_config_cp_size",
        "parallelism_config_cp_backend",
        "parallelism_config_cp_comm_strategy",
        "parallelism_config_sp_size",
        "parallelism_config_sp_backend",
        "parallelism_config_sp_seq_length",
        "parallelism_config_sp_seq_length_is_variable",
        "parallelism_config_sp_attn_implementation",
    ):
        assert f"--{name}" in done.stdout, name
