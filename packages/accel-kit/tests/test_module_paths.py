"""Accelerate's CLI, test-helper and shim modules under accel: real values from accel-launch and
accel-testing, and refusals that say why."""

from __future__ import annotations

import importlib
import os
import sys
import types
import warnings

import pytest

from accel._lazy import UnsupportedNameError


def test_config_args_names_are_accel_launchs_config(tmp_path, monkeypatch):
    from accel.commands.config.config_args import (
        ClusterConfig,
        SageMakerConfig,
        cache_dir,
        default_config_file,
        default_yaml_config_file,
        load_config_from_file,
    )
    from accel_launch.commands import config_api
    from accel_launch.config import files

    assert default_config_file == config_api.default_config_file
    assert cache_dir == str(files.config_dir()) and cache_dir.endswith(os.sep + "accel")
    assert default_yaml_config_file == os.path.join(cache_dir, "default_config.yaml")
    path = tmp_path / "c.yaml"
    path.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
    assert load_config_from_file(str(path)).num_processes == 2
    config = ClusterConfig.from_yaml_file(str(path))
    assert config.to_dict() == {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "MULTI_CPU",
        "num_processes": 2,
    }
    with pytest.raises(ValueError, match="Amazon SageMaker"):
        SageMakerConfig(compute_environment="AMAZON_SAGEMAKER")


def test_config_utils_lists_accels_dynamo_backends_in_accelerates_case():
    from accel.commands.config.config_utils import DYNAMO_BACKENDS
    from accel_launch.config.schema import DYNAMO_BACKENDS as ACCEL_BACKENDS

    assert "INDUCTOR" in DYNAMO_BACKENDS and "NO" not in DYNAMO_BACKENDS
    assert [b.lower() for b in DYNAMO_BACKENDS] == [b for b in ACCEL_BACKENDS if b != "no"]


def test_config_command_modules_are_accel_launchs_functions(tmp_path, monkeypatch):
    from accel.commands.config import default, update
    from accel_launch.config import defaults

    assert default.write_basic_config is defaults.write_basic_config
    target = tmp_path / "default.yaml"
    parser = default.default_command_parser(
        __import__("argparse").ArgumentParser().add_subparsers(), parents=[]
    )
    args = parser.parse_args(["--config_file", str(target)])
    args.func(args)
    assert "num_processes" in target.read_text()
    assert update.update_config(types.SimpleNamespace(config_file=str(target))) == str(target)
    with pytest.raises(UnsupportedNameError, match="accel <command>"):
        importlib.import_module("accel.commands.config.config").main  # noqa: B018


def test_cli_entry_point_is_the_accel_command(capsys):
    from accel.commands.accelerate_cli import main
    from accel_launch import cli

    assert main is cli.main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and "launch" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("module", "name", "reason"),
    [
        ("accel.commands.tpu", "tpu_command_parser", "gcloud"),
        ("accel.commands.to_fsdp2", "convert_config_to_fsdp2", "accelerate to-fsdp2"),
        ("accel.commands.utils", "CustomArgumentParser", "accel_launch.launch.options"),
        ("accel.commands.menu.keymap", "get_character", "questionary"),
        ("accel.commands.launch", "multi_gpu_launcher", "elastic agent"),
        ("accel.commands.config.sagemaker", None, None),
        ("accel.test_utils.scripts.test_sync", "test_gradient_accumulation", "conformance"),
        ("accel.test_utils.training", "mocked_dataloaders", "MRPC"),
    ],
)
def test_refusals_say_why(module, name, reason):
    loaded = importlib.import_module(module)
    if name is None:  # get_sagemaker_input is there, and refuses when called
        with pytest.raises(ValueError, match="Amazon SageMaker"):
            loaded.get_sagemaker_input()
        return
    with pytest.raises(UnsupportedNameError, match=reason):
        getattr(loaded, name)
    with pytest.raises(ImportError, match="not supported by accel"):
        exec(f"from {module} import {name}", {})


def test_bullet_menu_asks_with_questionary(monkeypatch):
    from accel.commands.menu import BulletMenu
    from accel_launch.config import questionnaire

    asked = {}

    def select(self, message, choices, default=None):
        asked.update(message=message, choices=choices, default=default)
        return "fp16"

    monkeypatch.setattr(questionnaire._Asker, "__init__", lambda self: None)
    monkeypatch.setattr(questionnaire._Asker, "select", select)
    assert BulletMenu("precision?", ["no", "fp16", "bf16"]).run(default_choice=2) == 1
    assert asked == {"message": "precision?", "choices": ["no", "fp16", "bf16"], "default": "bf16"}


def test_test_utils_are_accel_testings_helpers():
    from accel.test_utils import (
        DEFAULT_LAUNCH_COMMAND,
        RegressionDataset,
        RegressionModel,
        execute_subprocess_async,
        get_launch_command,
        require_cuda,
        slow,
    )
    from accel_testing.accelerate import testing

    assert DEFAULT_LAUNCH_COMMAND[:2] == ["accel", "launch"]
    assert get_launch_command(num_processes=2, debug=True) == [
        "accel",
        "launch",
        "--num_processes=2",
        "--debug",
    ]
    assert execute_subprocess_async is testing.execute_subprocess_async
    assert require_cuda is testing.require_cuda and slow is testing.slow
    dataset = RegressionDataset(seed=42)
    # Accelerate 1.15's RegressionDataset(seed=42)[0]
    assert (round(float(dataset[0]["x"]), 6), round(float(dataset[0]["y"]), 6)) == (
        0.304717,
        3.680557,
    )
    assert RegressionModel(a=2, b=1)(__import__("torch").tensor([3.0])).item() == 7.0


def test_test_utils_without_accel_testing_says_how_to_install_it(monkeypatch):
    import accel.test_utils as test_utils

    monkeypatch.setitem(sys.modules, "accel_testing", None)  # as if not installed
    monkeypatch.delitem(vars(test_utils), "slow", raising=False)
    for cached in [name for name in sys.modules if name.startswith("accel_testing.")]:
        monkeypatch.delitem(sys.modules, cached)
    with pytest.raises(ImportError, match=r"pip install \./packages/accel-testing"):
        test_utils.slow  # noqa: B018


def test_test_script_main_is_accel_tests_self_check():
    from accel.test_utils.scripts.test_script import main
    from accel_launch.selfcheck.run import main as selfcheck

    assert main is selfcheck


def test_memory_utils_warns_and_gives_find_executable_batch_size():
    sys.modules.pop("accel.memory_utils", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import accel.memory_utils as memory_utils
    assert any(issubclass(w.category, FutureWarning) for w in caught)
    from accel_core.memory import find_executable_batch_size

    assert memory_utils.find_executable_batch_size is find_executable_batch_size


def test_utils_rich_installs_riches_traceback_or_says_to_install_rich(monkeypatch):
    sys.modules.pop("accel.utils.rich", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match="pip install rich"):
        importlib.import_module("accel.utils.rich")
    monkeypatch.undo()
    installed = []
    rich = types.ModuleType("rich")
    traceback = types.ModuleType("rich.traceback")
    traceback.install = lambda **kwargs: installed.append(kwargs)
    rich.traceback = traceback
    monkeypatch.setitem(sys.modules, "rich", rich)
    monkeypatch.setitem(sys.modules, "rich.traceback", traceback)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    sys.modules.pop("accel.utils.rich", None)
    importlib.import_module("accel.utils.rich")
    assert installed == [{"show_locals": False}]
    sys.modules.pop("accel.utils.rich", None)
