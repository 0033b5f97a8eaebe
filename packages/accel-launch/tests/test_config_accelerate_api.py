"""accel_launch.config.accelerate_api: Accelerate's config-file objects and folder names over
accel's config code."""

from __future__ import annotations

import argparse
import os

import pytest

from accel_launch.config import accelerate_api, files
from accel_launch.errors import ConfigError


def test_the_folders_are_accels(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("ACCEL_CONFIG_FILE", raising=False)
    assert files.config_home() == tmp_path and files.config_dir() == tmp_path / "accel"
    assert files.default_config_file() == tmp_path / "accel" / "default_config.yaml"
    # the module's strings were fixed at import, as Accelerate's are
    assert accelerate_api.default_yaml_config_file == os.path.join(
        accelerate_api.cache_dir, "default_config.yaml"
    )


def test_cluster_config_round_trips_through_a_file(tmp_path):
    config = accelerate_api.ClusterConfig(distributed_type="MULTI_CPU", num_processes=2)
    assert config.num_processes == 2 and config.compute_environment == "LOCAL_MACHINE"
    for name in ("c.yaml", "c.json"):
        config.to_yaml_file(tmp_path / name)
        loaded = accelerate_api.ClusterConfig.from_yaml_file(str(tmp_path / name))
        assert loaded == config and loaded.to_dict() == config.to_dict()
    with pytest.raises(ConfigError, match="num_processes"):
        accelerate_api.ClusterConfig(num_processes="two")
    with pytest.raises(ConfigError, match="num_processe"):
        accelerate_api.ClusterConfig(num_processe=2)


def test_sagemaker_is_refused():
    with pytest.raises(ConfigError, match="Amazon SageMaker"):
        accelerate_api.SageMakerConfig()
    with pytest.raises(ConfigError, match="Amazon SageMaker"):
        accelerate_api.get_sagemaker_input()


def test_update_config_takes_accelerates_arguments(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("fsdp_config: {}\nnum_processes: 3\n")
    assert accelerate_api.update_config(argparse.Namespace(config_file=str(path))) == str(path)
    assert "mixed_precision: 'no'" in path.read_text() and "num_processes: 3" in path.read_text()


def test_subcommand_help_formatter_drops_the_placeholder():
    parser = argparse.ArgumentParser(
        prog="accel",
        usage="accel <command> [<args>] ",
        formatter_class=(accelerate_api.SubcommandHelpFormatter),
    )
    assert "<command> [<args>]" not in parser.format_usage()
