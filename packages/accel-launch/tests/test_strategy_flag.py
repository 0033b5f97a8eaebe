"""``accel launch --strategy NAME`` and the config file's ``strategy`` key: any registered strategy
by name, with its source in ``--dry-run``; unknown names and contradicting flags refused."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, run_accel

from accel_launch.config import schema
from accel_launch.errors import AccelLaunchError, ConfigError
from accel_launch.launch import engines, options
from accel_launch.launch.resolve import resolve
from accel_launch.launch.workerenv import accel_environment


def _run(tmp_path: Path, *args: str, **env: str):
    (tmp_path / "script.py").write_text("print('the script ran')\n")
    environment = clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), **env)
    return run_accel("launch", *args, "--dry-run", "script.py", env=environment, cwd=tmp_path)


def _rows(out: str) -> dict[str, list[str]]:
    """The ``resolved configuration`` rows of a dry run: name -> [value, source]."""
    block = out.split("resolved configuration (value, source):\n", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in block.splitlines():
        name, rest = line.strip().split("  ", 1)
        rows[name] = rest.strip().split(maxsplit=1)
    return rows


def _environment(out: str) -> dict[str, str]:
    block = out.split("worker environment (set by accel launch):\n", 1)[1].split("\n\n", 1)[0]
    return dict(line.strip().split("=", 1) for line in block.splitlines())


def test_strategy_ddp_dry_run_shows_it_with_its_source(tmp_path: Path):
    done = _run(tmp_path, "--strategy", "ddp", "--num_processes", "2", "--cpu")
    assert done.returncode == 0, done.stderr
    rows = _rows(done.stdout)
    assert rows["strategy"] == ["ddp", "flag"]
    assert rows["distributed_type"] == ["MULTI_CPU", "flag"]
    env = _environment(done.stdout)
    assert (env["ACCEL_STRATEGY"], env["ACCEL_STRATEGY_CONFIG"]) == ("ddp", "{}")
    assert "the script ran" not in done.stdout
    # the environment variable is a source too, below the flag
    done = _run(tmp_path, "--num_processes", "2", "--cpu", ACCEL_STRATEGY="DDP")
    assert _rows(done.stdout)["strategy"] == ["ddp", "env ACCEL_STRATEGY"]


def test_an_unknown_strategy_lists_the_installed_ones(tmp_path: Path):
    done = _run(tmp_path, "--strategy", "zero_bubble")
    assert done.returncode == 2
    assert done.stdout == ""
    message = done.stderr
    assert message.startswith("accel launch: error: unknown strategy 'zero_bubble' (flag). ")
    installed = message.split("Installed strategies: ", 1)[1].split(". ", 1)[0].split(", ")
    assert installed[:2] == ["single_device", "ddp"]
    assert set(installed) == {"single_device", "ddp", *engines.installed()}
    assert "register an `accel.strategies` entry point" in message


def test_strategy_against_a_use_flag_names_both(tmp_path: Path):
    if engines.engine("fsdp") is None:
        pytest.skip("needs accel-backends (the fsdp engine) installed")
    done = _run(tmp_path, "--strategy", "ddp", "--use_fsdp", "--num_processes", "2", "--cpu")
    assert done.returncode == 2
    assert done.stderr == (
        "accel launch: error: --strategy ddp and --use_fsdp (strategy fsdp) choose different "
        "strategies; pass one of them\n"
    )
    same = _run(tmp_path, "--strategy", "fsdp", "--use_fsdp", "--num_processes", "2", "--cpu")
    assert same.returncode == 0, same.stderr
    assert _rows(same.stdout)["strategy"] == ["fsdp", "flag"]


def test_config_file_strategy_key_and_its_source(tmp_path: Path):
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 2\n"
        "use_cpu: true\nstrategy: ddp\n"
    )
    done = _run(tmp_path, "--config_file", str(config))
    assert done.returncode == 0, done.stderr
    rows = _rows(done.stdout)
    assert rows["strategy"] == ["ddp", f"config file {config}"]
    assert rows["distributed_type"] == ["MULTI_CPU", f"config file {config}"]
    assert _environment(done.stdout)["ACCEL_STRATEGY"] == "ddp"
    # a flag outranks the file
    done = _run(tmp_path, "--config_file", str(config), "--strategy", "single_device")
    assert done.returncode == 2
    assert "strategy single_device (flag) runs one process, but --num_processes is 2" in (
        done.stderr
    )


def _flags(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    options.add_options(parser)
    return parser.parse_args(list(args))


@pytest.fixture
def only_built_in(monkeypatch: pytest.MonkeyPatch):
    """The launcher as with accel-launch alone installed: no engine descriptions."""
    cached = (options.launch_options, schema.sections, schema.top_keys)
    monkeypatch.setattr(engines, "installed", dict)
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()


def test_without_engines_only_the_built_in_strategies_exist(only_built_in, tmp_path: Path):
    assert engines.strategy_names() == ["single_device", "ddp"]
    assert [o.name for o in options.launch_options() if o.chooses] == []  # no engine flag
    plan = resolve(_flags("--strategy", "ddp", "--num_processes", "2", "--cpu"), {}, {})
    assert (plan.strategy, plan.distributed_type.value) == ("ddp", "MULTI_CPU")
    assert json.loads(accel_environment(plan)["ACCEL_STRATEGY_CONFIG"]) == {}
    with pytest.raises(AccelLaunchError, match=r"Installed strategies: single_device, ddp\. "):
        resolve(_flags("--strategy", "fsdp"), {}, {})
    # Accelerate writes empty sections of engines not in use: accepted; a used one is not
    accepted = schema.validate({"distributed_type": "MULTI_CPU", "fsdp_config": {}}, "c.yaml")
    assert accepted == {"distributed_type": "MULTI_CPU", "fsdp_config": {}}
    with pytest.raises(ConfigError, match=r"distributed_type='FSDP' is not allowed.*entry point"):
        schema.validate({"distributed_type": "FSDP"}, "c.yaml")
    with pytest.raises(ConfigError, match=r"unknown key 'fsdp_config'.*entry point"):
        schema.validate({"fsdp_config": {"fsdp_version": 2}}, "c.yaml")


def test_without_engines_a_use_flag_says_where_engines_come_from(
    only_built_in, capsys: pytest.CaptureFixture[str]
):
    from accel_launch import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(["launch", "--use_deepspeed", "--dry-run", "script.py", "--use_fsdp"])
    assert stopped.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    # only the launcher's own unknown flag: the script's arguments are the script's
    assert message.startswith("accel: error: unrecognized arguments: --use_deepspeed (no ")
    assert "no installed engine has --use_deepspeed; installed strategies: single_device, ddp)" in (
        message
    )
    assert "`pip install accel-backends`" in message and "--use_fsdp" not in message


def test_a_use_flag_outranks_the_environment_and_the_file():
    described = [o for o in options.launch_options() if o.chooses]
    if not described:
        pytest.skip("needs an engine with a --use_* flag installed")
    flag = described[0]
    plan = resolve(_flags(f"--{flag.name}"), {"ACCEL_STRATEGY": "ddp"}, {"strategy": "ddp"})
    assert (plan.strategy, plan.values["strategy"].source) == (flag.chooses, "flag")


def test_the_engines_are_read_through_accel_base_without_torch():
    # the description types and the entry-point reader are accel-base's (no try/except around
    # an accel-core import); the engines' descriptions are torch-free modules of their own
    from accel_base import engine_description

    assert engines.engine_for is engine_description.engine_for
    code = (
        "import sys\n"
        "from accel_launch.launch import engines\n"
        "found = engines.installed()\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"]
