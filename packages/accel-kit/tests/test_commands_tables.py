"""``accel.commands.{config,launch,env,estimate,test}``: Accelerate's command functions, which
transformers, peft and trl import by name, resolve to accel-launch's."""

import importlib
import os

import pytest

from accel._lazy import UnsupportedNameError

TABLES = {
    "accel.commands.config": [
        "config_command_parser",
        "default_command_parser",
        "get_config_parser",
        "load_config_from_file",
        "update_command_parser",
    ],
    "accel.commands.launch": ["launch_command", "launch_command_parser"],
    "accel.commands.env": ["env_command", "env_command_parser"],
    "accel.commands.estimate": [
        "create_ascii_table",
        "create_empty_model",
        "estimate_command",
        "estimate_command_parser",
        "estimate_training_usage",
        "gather_data",
    ],
    "accel.commands.test": ["test_command", "test_command_parser"],
}
CALLABLES = [(module, name) for module, names in TABLES.items() for name in names]


@pytest.mark.parametrize(("module_name", "name"), CALLABLES)
def test_every_command_name_is_accel_launchs_function(module_name, name):
    value = getattr(importlib.import_module(module_name), name)
    assert callable(value)
    assert value.__module__.startswith("accel_launch.")


def test_the_tables_list_exactly_these_names():
    for module_name, names in TABLES.items():
        public = set(importlib.import_module(module_name).__all__)
        assert public - {"default_config_file"} == set(names), module_name


def test_launch_command_is_accel_launchs():
    import accel_launch.commands.launch_cmd as launch_cmd
    from accel.commands.launch import launch_command, launch_command_parser

    assert launch_command is launch_cmd.launch_command
    assert launch_command_parser is launch_cmd.launch_command_parser
    assert launch_command_parser().parse_args(["train.py"]).func is launch_command


def test_default_config_file_is_a_path_string_and_the_reader_gives_to_dict(tmp_path):
    from accel.commands.config import default_config_file, load_config_from_file

    assert isinstance(default_config_file, str) and os.path.isabs(default_config_file)
    path = tmp_path / "c.yaml"
    path.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
    assert load_config_from_file(str(path)).to_dict() == {
        "distributed_type": "MULTI_CPU",
        "num_processes": 2,
    }


def test_hub_helpers_of_estimate_say_why_they_are_missing():
    import accel.commands.estimate as estimate

    with pytest.raises(UnsupportedNameError, match="never queries the Hugging Face Hub"):
        estimate.verify_on_hub  # noqa: B018
