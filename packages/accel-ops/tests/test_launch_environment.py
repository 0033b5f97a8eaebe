"""LaunchEnvironment.from_environ: defaults, every field, and errors that name the variable."""

import pickle

import pytest
import torch

from accel_ops import LaunchEnvironment, LaunchEnvironmentError, PartialState


def test_defaults_for_an_empty_environment():
    env = LaunchEnvironment.from_environ({})
    assert env == LaunchEnvironment()
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (0, 1, 0, 1)
    assert env.master_addr == "127.0.0.1" and env.master_port is None
    assert env.mixed_precision == "no" and env.dynamo_backend == "no"
    assert env.process_group_timeout == 1800.0
    assert env.strategy is None and dict(env.strategy_config) == {}
    assert not env.is_distributed


def test_every_variable_is_parsed():
    env = LaunchEnvironment.from_environ(
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "node0",
            "MASTER_PORT": "29555",
            "ACCEL_USE_CPU": "YES",
            "ACCEL_MIXED_PRECISION": "BF16",
            "ACCEL_DEBUG_MODE": "on",
            "ACCEL_STRATEGY": "fsdp",
            "ACCEL_STRATEGY_CONFIG": '{"sharding": "FULL_SHARD", "offload": {"params": true}}',
            "ACCEL_DYNAMO_BACKEND": "INDUCTOR",
            "ACCEL_DYNAMO_MODE": "max-autotune",
            "ACCEL_DYNAMO_USE_FULLGRAPH": "true",
            "ACCEL_DYNAMO_USE_DYNAMIC": "0",
            "ACCEL_GRADIENT_ACCUMULATION_STEPS": "4",
            "ACCEL_PROCESS_GROUP_TIMEOUT": "12.5",
            "ACCEL_NUM_MACHINES": "2",
            "ACCEL_CONFIG_FILE": "/tmp/c.yaml",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (5, 8, 1, 4)
    assert env.group_rank == 1 and env.master_addr == "node0" and env.master_port == 29555
    assert env.use_cpu is True and env.debug is True
    assert env.mixed_precision == "bf16" and env.dynamo_backend == "inductor"
    assert env.dynamo_mode == "max-autotune"
    assert env.dynamo_use_fullgraph is True and env.dynamo_use_dynamic is False
    assert env.strategy == "fsdp"
    assert env.strategy_config["offload"] == {"params": True}
    assert env.gradient_accumulation_steps == 4
    assert env.process_group_timeout == 12.5
    assert env.num_machines == 2 and env.config_file == "/tmp/c.yaml"
    assert env.is_distributed


def test_local_world_size_defaults_to_world_size():
    assert LaunchEnvironment.from_environ({"WORLD_SIZE": "3"}).local_world_size == 3


def test_is_frozen():
    env = LaunchEnvironment.from_environ({})
    with pytest.raises(AttributeError):
        env.rank = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        env.strategy_config["x"] = 1  # type: ignore[index]


def test_pickles_with_its_read_only_strategy_config():
    env = LaunchEnvironment.from_environ(
        {"WORLD_SIZE": "2", "RANK": "1", "ACCEL_STRATEGY_CONFIG": '{"zero_stage": 3}'}
    )
    copy = pickle.loads(pickle.dumps(env))
    assert copy == env and copy.rank == 1 and dict(copy.strategy_config) == {"zero_stage": 3}
    with pytest.raises(TypeError):
        copy.strategy_config["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("WORLD_SIZE", "abc", "an integer >= 1"),
        ("WORLD_SIZE", "0", "an integer >= 1"),
        ("RANK", "-1", "an integer >= 0"),
        ("LOCAL_RANK", "1.5", "an integer >= 0"),
        ("MASTER_PORT", "70000", "between 1 and 65535"),
        ("MASTER_ADDR", " ", "host name"),
        ("ACCEL_USE_CPU", "maybe", "a boolean"),
        ("ACCEL_DEBUG_MODE", "2", "a boolean"),
        ("ACCEL_MIXED_PRECISION", "fp32", "one of no, fp16, bf16"),
        ("ACCEL_DYNAMO_BACKEND", "fast", "torch.compile backend"),
        ("ACCEL_DYNAMO_MODE", "fastest", "torch.compile mode"),
        ("ACCEL_DYNAMO_USE_FULLGRAPH", "sure", "a boolean"),
        ("ACCEL_STRATEGY_CONFIG", "[1, 2]", "a JSON object, got a JSON list"),
        ("ACCEL_STRATEGY_CONFIG", "{oops", "a JSON object (parse error"),
        ("ACCEL_GRADIENT_ACCUMULATION_STEPS", "0", "an integer >= 1"),
        ("ACCEL_PROCESS_GROUP_TIMEOUT", "-3", "seconds > 0"),
        ("ACCEL_PROCESS_GROUP_TIMEOUT", "nan", "seconds > 0"),
        ("ACCEL_NUM_MACHINES", "x", "an integer >= 1"),
    ],
)
def test_bad_values_name_variable_value_and_expectation(variable, value, expected):
    with pytest.raises(LaunchEnvironmentError) as info:
        LaunchEnvironment.from_environ({variable: value})
    message = str(info.value)
    assert message.startswith(f"{variable}={value!r} is not valid; expected")
    assert expected in message
    assert isinstance(info.value, ValueError)


def test_rank_out_of_range():
    with pytest.raises(ValueError, match=r"RANK=2 is out of range for WORLD_SIZE=2"):
        LaunchEnvironment.from_environ({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match=r"LOCAL_RANK=1 is out of range for LOCAL_WORLD_SIZE=1"):
        LaunchEnvironment.from_environ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"})


def test_partial_state_reports_bad_world_size(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "abc")
    with pytest.raises(ValueError, match=r"WORLD_SIZE='abc' is not valid; expected an integer"):
        PartialState()


def test_missing_master_port_is_explained(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(LaunchEnvironmentError, match=r"MASTER_PORT is not set but WORLD_SIZE=2"):
        PartialState()


def test_the_torch_device_variable_sets_the_process_device(monkeypatch):
    assert LaunchEnvironment.from_environ({"ACCEL_TORCH_DEVICE": "cuda"}).torch_device == "cuda"
    read = LaunchEnvironment.from_environ({"ACCELERATE_TORCH_DEVICE": "meta"})  # Accelerate's
    assert read.torch_device == "meta"
    with pytest.raises(
        LaunchEnvironmentError, match=r"ACCELERATE_TORCH_DEVICE='gpu0'.*torch device"
    ):
        LaunchEnvironment.from_environ({"ACCELERATE_TORCH_DEVICE": "gpu0"})
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "meta")
    PartialState._reset_state()
    assert PartialState().device == torch.device("meta")
